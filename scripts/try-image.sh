#!/bin/sh
# Run the container image the way docs/teaching-a-class.md says, and check that it traces:
# the sandbox's layers as /healthz reports them, a lesson, the CLI inside the container, and an
# upload sent with the token from outside it. Exits 1 at the first check that fails.
#
#   sh scripts/try-image.sh IMAGE            # an image built from the Dockerfile
#
# ENGINE (docker where its daemon answers, else podman), ENGINE_FLAGS (before the engine's command, e.g.
# "--runtime runc --cgroup-manager cgroupfs" for podman on a machine with cgroup v1 and v2 at
# once), RUN_FLAGS (extra `run` options, e.g. "--privileged" for the cgroups layer), PORT
# (18765) and TOKEN change how. Nothing is published but on 127.0.0.1.
set -eu

IMAGE=${1:?usage: sh scripts/try-image.sh IMAGE}
if [ -z "${ENGINE:-}" ]; then  # a docker whose daemon answers, else podman (no daemon)
    if docker info >/dev/null 2>&1; then ENGINE=docker; else ENGINE=$(command -v podman || true); fi
fi
[ -n "$ENGINE" ] || { echo "no docker daemon answers and podman is not installed" >&2; exit 2; }
ENGINE_FLAGS=${ENGINE_FLAGS:-}
RUN_FLAGS=${RUN_FLAGS:-}
PORT=${PORT:-18765}
TOKEN=${TOKEN:-try-image-$$}
NAME=autograd-lab-try-$$
BASE=http://127.0.0.1:$PORT
SMALL='import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\nprint(w.grad.tolist())\n'

engine() { "$ENGINE" $ENGINE_FLAGS "$@"; }
fail() { echo "FAILED: $*" >&2; engine logs "$NAME" 2>&1 | tail -20 >&2; exit 1; }
trap 'engine rm -f "$NAME" >/dev/null 2>&1 || true' EXIT

# the options the docs give (SYS_PTRACE: the server opens each run's folder through the
# worker's /proc/PID/root); the ulimits: podman's defaults are above what a shell's hard limits
# allow (runc then refuses to start the container)
engine run -d --name "$NAME" -p "127.0.0.1:$PORT:8000" -e AUTOGRAD_LAB_TOKEN="$TOKEN" \
    --cap-add SYS_ADMIN --cap-add SYS_PTRACE --security-opt seccomp=unconfined \
    --security-opt apparmor=unconfined --cgroupns private \
    --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 $RUN_FLAGS "$IMAGE" >/dev/null

echo "waiting for the self-test (up to 300 s)"
i=0
until curl -sf "$BASE/healthz" 2>/dev/null | python3 -c \
        'import json, sys; sys.exit(json.load(sys.stdin)["sandbox"]["state"] != "done")' \
        2>/dev/null; do
    i=$((i + 1)); [ $i -lt 150 ] || fail "the self-test did not finish"
    sleep 2
done
curl -sf "$BASE/healthz" | python3 -c '
import json, sys
h = json.load(sys.stdin)
s = h["sandbox"]
print("healthz:", h["status"], "| layers holding:",
      ", ".join(k for k, v in s["layers"].items() if v.get("holds")))
print("missing:", s["missing"] or "none", "| failing:", s["failing"] or "none")
sys.exit(1 if s["failing"] else 0)' || fail "a sandbox layer did not hold"

echo "a lesson"
curl -sf -m 300 "$BASE/api/scenarios/reused_layer/trace" | python3 -c '
import json, sys
t = json.load(sys.stdin)
assert t["error"] is None, t["error"]
print("reused_layer:", len(t["events"]), "events, parameters", sorted(t["params"])[:4])' \
    || fail "the lesson did not trace"

echo "the CLI inside the container"
engine exec "$NAME" sh -c "printf '$SMALL' > /tmp/small.py && cd /tmp && \
    autograd-lab trace small.py -o /tmp/small.json && python -c \
    'import json; t = json.load(open(\"/tmp/small.json\")); print(t[\"error\"], t[\"stdout\"])'" \
    || fail "the CLI's run failed"

MISSING=$(curl -sf "$BASE/healthz" | python3 -c \
    'import json, sys; print(" ".join(json.load(sys.stdin)["sandbox"]["missing"]))')
echo "an upload with the token, from outside the container (layers missing: ${MISSING:-none})"
printf "$SMALL" | python3 -c '
import json, sys, urllib.request
body = json.dumps({"source": sys.stdin.read(), "name": "small.py"}).encode()
req = urllib.request.Request(sys.argv[1] + "/api/runs", body, {
    "Content-Type": "application/json", "Authorization": "Bearer " + sys.argv[2]})
try:
    answer = json.load(urllib.request.urlopen(req, timeout=300))
except urllib.error.HTTPError as e:
    said = json.loads(e.read())
    # a layer missing: the server runs no code sent from another machine, and says so
    if sys.argv[3] and said.get("code") == "sandbox_incomplete":
        sys.exit(print("upload refused, as it should be:", said["detail"][:120]))
    sys.exit(f"{e.code}: {said}")
t = answer  # the Trace itself, with its run beside it
assert t["error"] is None, t["error"]
assert not sys.argv[3], "ran although a sandbox layer is missing"
print("upload:", t["stdout"].strip())' "$BASE" "$TOKEN" "$MISSING" || fail "the upload check"
echo "all checks passed"
