"""adaptive: plans per question class, one scenario with three variants (``--param variant=...``), each a
module here with its own deployment, load, result file and table:

- ``real``: adaptive ``mai`` against the paper's plan, Full RT and large-reason on the real CPU stack
  (real.py);
- ``shift``: one class whose traffic shifts, on the real CPU stack (shift.py);
- ``capacity``: adaptive against ``sequential`` on the emulated tier's six profiles, and a stream that
  shifts profile (capacity.py)."""

from __future__ import annotations

from ...scenario import module_family
from . import capacity, real, shift

SCENARIO = module_family(
    "adaptive",
    (real, "Plans per question class on the real stack", "adaptive/real-stack.json", "mai-cpu.yaml"),
    (
        shift,
        "Plans when a class's traffic shifts (real stack)",
        "adaptive/shift-real.json",
        "mai-cpu.yaml",
    ),
    (
        capacity,
        "Plans per question class on the capacity model",
        "adaptive/capacity.json",
        "mai-emulated.yaml",
    ),
)
