"""The built-in scenarios: what each one is, read from its source without running it.

A scenario is an ordinary script in `scenarios/`. Its module docstring is the narration: the
first line is the title; paragraphs that start with "Question:" and "Answer:" are the question
and the answer. Optional module-level literals say what the page may vary:

    VARIANTS = {"detach": "F.linear with detached weight", ...}   # --variant NAME
    OPTIONS = {"k": {"default": 3, "choices": [0, 1, 2, 3], "help": "..."}}   # --k VALUE

A paragraph may end with a `Show:` line naming what presenter mode highlights while that
paragraph is on screen (see `narration_steps`), and a scenario may ask the class its own
question:

    CLASS_QUESTION = {"prompt": "...", "choices": ["1", "2", "3"], "answer": 2}

The runner passes the choice as command-line arguments, so `python scenarios/NAME.py
--variant detach` shows the same thing as the page. Reading uses `ast`: no scenario code runs
in the process that lists them.

What anyone is served of a scenario, and what runs, is `Scenario.source()`: the file with its
CLASS_QUESTION taken out (`without_class_question`), so that the answer is on no page, in no
Trace and in no drawing before the teacher reveals it.
"""

from __future__ import annotations

import ast
import functools
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from typing_extensions import TypedDict

from .resources import resource_dir

__all__ = ["Scenario", "ScenarioSummary", "Step", "ClassQuestion", "load_catalog",
           "narration_steps", "scenario_args", "without_class_question", "OptionError",
           "UnknownVariant", "ScenarioError", "RESERVED_QUERY_NAMES", "SHOW_KINDS"]

_NAME = re.compile(r"[a-z][a-z0-9_]*")

# The page's own query parameters (static/js/permalink.js reads and writes them, and the API
# takes the first three): a scenario option may not be called any of these, since every other
# query parameter is an option (`?k=2`).
RESERVED_QUERY_NAMES = ("variant", "device", "event", "node", "param", "line", "step", "cell",
                        "present", "say", "layout", "depth", "open", "vs",
                        # the graph API's own (not in a page's address)
                        "fold", "view", "font")
# what a `Show:` line may name: each one presenter mode brings on screen (static/js/presenter.js),
# so a step never points at something the room cannot see
SHOW_KINDS = ("param", "node", "line", "diagnostic", "heatmap")
_SHOW = re.compile(r"^[ \t]*Show:[ \t]*(.*)$", re.MULTILINE)


class ScenarioError(ValueError):
    """A scenario file the catalogue cannot use; the message names the file and the fix."""


class OptionError(ValueError):
    """An option the scenario does not have, or a value it does not take; the message lists
    what it does have."""


class UnknownVariant(OptionError):
    """A variant the scenario does not have."""


class ScenarioSummary(TypedDict):
    """What the index card and GET /api/scenarios show of a scenario."""
    name: str
    title: str
    question: str
    answer: str
    variants: dict[str, str]
    options: dict[str, dict]
    default_variant: str | None


class Step(TypedDict):
    """One paragraph of the narration, as presenter mode shows it, and what it points at:
    `show` items are {"param": NAME}, {"node": OP NAME (the first node of that name)},
    {"line": NUMBER or a piece of the line's text}, {"diagnostic": CODE} or
    {"heatmap": NAME (the parameter whose .grad heat map is shown)}."""
    text: str
    show: list[dict]


class ClassQuestion(TypedDict):
    prompt: str
    choices: list[str]
    answer: int


def narration_steps(text: str, where: str = "the docstring") -> tuple[str, list[Step]]:
    """(the narration without its Show lines, its paragraphs as steps).

        What to look at: the parameter `middle_linear.weight` has one edge per use.
        Show: param middle_linear.weight; line model(x, args.k)

    Kinds: `param NAME`, `node OPNAME` (e.g. MseLossBackward0), `line N` or `line TEXT` (the
    first source line containing TEXT: it survives edits above it), `diagnostic CODE` (the
    run's findings of that code, e.g. no_gradient) and `heatmap NAME` (the parameter NAME and
    the heat map of its gradient). Presenter mode shows each of them (static/js/presenter.js);
    any other kind is refused."""
    steps: list[Step] = []
    for para in re.split(r"\n\s*\n", text.strip()):
        show: list[dict] = []
        for match in _SHOW.finditer(para):
            for item in filter(None, (part.strip() for part in match.group(1).split(";"))):
                kind, _, value = item.partition(" ")
                value = value.strip()
                if kind not in SHOW_KINDS or not value:
                    raise ScenarioError(f"{where}: `Show: {item}` is not one of "
                                        f"{', '.join(k + ' ...' for k in SHOW_KINDS)}")
                show.append({kind: int(value) if kind == "line" and value.isdigit() else value})
        words = " ".join(_SHOW.sub("", para).split())
        if words:
            steps.append({"text": words, "show": show})
    return "\n\n".join(s["text"] for s in steps), steps


def _class_question(value: object, where: str) -> ClassQuestion | None:
    if value is None:
        return None
    ok = isinstance(value, dict) and isinstance(value.get("prompt"), str) and \
        isinstance(value.get("choices"), list) and 2 <= len(value["choices"]) <= 12 and \
        all(isinstance(c, str) and c for c in value["choices"]) and \
        isinstance(value.get("answer"), int) and 0 <= value["answer"] < len(value["choices"])
    if not ok:
        raise ScenarioError(f"{where}: CLASS_QUESTION must be {{\"prompt\": str, \"choices\": "
                            "[2 to 12 strings], \"answer\": index of the right choice}")
    return {"prompt": value["prompt"], "choices": list(value["choices"]),
            "answer": value["answer"]}


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    title: str
    question: str
    answer: str
    narration: str
    variants: dict[str, str] = field(default_factory=dict)
    options: dict[str, dict] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    class_question: ClassQuestion | None = None

    def source(self) -> str:
        """The script as it is served and run: the file as it is now, without its
        CLASS_QUESTION (`without_class_question`)."""
        return without_class_question(self.path.read_text(encoding="utf-8"))

    @property
    def default_variant(self) -> str | None:
        return next(iter(self.variants), None)

    def summary(self) -> ScenarioSummary:
        return {"name": self.name, "title": self.title, "question": self.question,
                "answer": self.answer, "variants": self.variants, "options": self.options,
                "default_variant": self.default_variant}


def _paragraph(doc: str, label: str) -> str:
    for para in re.split(r"\n\s*\n", doc):
        text = " ".join(_SHOW.sub("", para).split())
        if text.startswith(label + ":"):
            return text[len(label) + 1:].strip()
    return ""


_QUESTION_KEPT = "# (the class's question: kept on the server until the teacher reveals it)"


def _assigns_class_question(stmt: ast.stmt) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else \
        [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id == "CLASS_QUESTION" for t in targets)


# `ast.parse` is not thread-safe on CPython 3.11: parallel requests in FastAPI's thread pool
# raised "SystemError: AST constructor recursion depth mismatch" (the catalogue's reading is
# serialized in deps.py for that; a scenario's served source, parsed per request, was not and
# once answered 500 to a page). Every parse here takes this lock.
_PARSING = threading.Lock()


def _parse(text: str, filename: str = "<unknown>") -> ast.Module:
    with _PARSING:
        return ast.parse(text, filename=filename)


@functools.lru_cache(maxsize=64)  # a scenario's file, served again and again: parsed once
def without_class_question(text: str) -> str:
    """`text`, a scenario's script, with every module-level assignment to CLASS_QUESTION taken
    out: its prompt may be shown, but its answer is the teacher's until the reveal, and a
    script is served whole (the page's listing, the Trace's `script.source`, a failure's
    quoted lines). Every other line stays where it was, so that the lines a Trace records are
    the file's: the assignment's lines become one comment and blank lines, or `pass` where it
    shares a line with other code. A script that does not parse is left as it is (it cannot
    have a question the catalogue read)."""
    try:
        tree = _parse(text)
    except SyntaxError:
        return text
    # lines as ast counts them: a file read as text has "\n" ends (str.splitlines would also
    # end lines at form feeds and U+2028, which Python does not)
    lines = text.split("\n")
    for stmt in reversed(tree.body):
        if not _assigns_class_question(stmt):
            continue
        first, last = stmt.lineno - 1, stmt.end_lineno - 1
        # ast's columns count UTF-8 bytes
        before = lines[first].encode("utf-8")[:stmt.col_offset].decode("utf-8")
        after = lines[last].encode("utf-8")[stmt.end_col_offset:].decode("utf-8")
        if after.strip().startswith("#"):  # a comment after it may say the answer too
            after = ""
        if not before.strip() and not after.strip():
            body = [before + _QUESTION_KEPT] + [""] * (last - first)
        elif first == last:
            body = [before + "pass" + after]
        else:  # it shares its first or last line with other code: `x = 1; CLASS_QUESTION = …`
            body = [before.rstrip()] + [""] * (last - first - 1) + ["pass" + after]
        lines[first:last + 1] = body
    return "\n".join(lines)


def parse_scenario(path: Path) -> Scenario:
    tree = _parse(path.read_text(encoding="utf-8"), filename=str(path))
    doc = ast.get_docstring(tree) or ""
    literals: dict[str, object] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Name) \
                and stmt.targets[0].id in ("VARIANTS", "OPTIONS", "CLASS_QUESTION"):
            literals[stmt.targets[0].id] = ast.literal_eval(stmt.value)
    reserved = sorted(set(literals.get("OPTIONS", {})) & set(RESERVED_QUERY_NAMES))
    if reserved:
        raise ScenarioError(f"{path.name}: option {', '.join(map(repr, reserved))} has the name "
                            f"of one of the page's own query parameters "
                            f"({', '.join(RESERVED_QUERY_NAMES)}); rename it")
    title, _, rest = doc.partition("\n")
    narration, steps = narration_steps(rest, f"{path.name}'s docstring")
    return Scenario(
        name=path.stem, path=path, title=title.strip() or path.stem.replace("_", " "),
        question=_paragraph(doc, "Question"), answer=_paragraph(doc, "Answer"),
        narration=narration, variants=dict(literals.get("VARIANTS", {})),
        options=dict(literals.get("OPTIONS", {})), steps=steps,
        class_question=_class_question(literals.get("CLASS_QUESTION"), path.name))


def load_catalog(folder: Path | None = None) -> dict[str, Scenario]:
    folder = folder or resource_dir("scenarios")
    out = {}
    for path in sorted(folder.glob("*.py")):
        if _NAME.fullmatch(path.stem):
            out[path.stem] = parse_scenario(path)
    return out


def scenario_args(scenario: Scenario, variant: str | None, options: dict[str, str]) -> list[str]:
    """Command-line arguments for one variant and options; OptionError if they are not its own."""
    args: list[str] = []
    if variant is not None:
        if variant not in scenario.variants:
            known = ", ".join(scenario.variants) or "none"
            raise UnknownVariant(f"scenario {scenario.name!r} has no variant {variant!r} "
                                 f"(its variants: {known})")
        args += ["--variant", variant]
    elif scenario.variants:
        args += ["--variant", scenario.default_variant]
    for key, value in options.items():
        spec = scenario.options.get(key)
        if spec is None:
            known = ", ".join(scenario.options) or "none"
            raise OptionError(f"scenario {scenario.name!r} has no option {key!r} "
                              f"(its options: {known})")
        choices = spec.get("choices")
        if choices is not None and str(value) not in {str(c) for c in choices}:
            raise OptionError(f"option {key!r} of {scenario.name!r} must be one of "
                              f"{', '.join(str(c) for c in choices)}, not {value!r}")
        args += [f"--{key}", str(value)]
    return args
