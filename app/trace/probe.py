"""`python -m app.trace.probe`: print the torch version and the devices this machine offers, as
JSON. The web process asks this (it does not import torch itself)."""

import json

import torch


def devices() -> list[str]:
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return found


if __name__ == "__main__":
    print(json.dumps({"torch": torch.__version__, "devices": devices()}))
