"""Run every benchmark in this folder, one after the other (`make bench`)."""

import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
status = 0
for script in sorted(here.glob("*.py")):
    if script.name == "run.py":
        continue
    print(f"== {script.name}", flush=True)
    status |= subprocess.run([sys.executable, str(script)]).returncode
sys.exit(status)
