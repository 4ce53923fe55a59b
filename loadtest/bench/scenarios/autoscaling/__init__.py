"""autoscaling: the large model under load, one scenario with four variants (``--param variant=...``),
each a module here with its own deployment, load, result file and table:

- ``policies``: per-deployment queue autoscaling against the coupled policy on the emulated engines,
  a ramp and a burst on two profiles (policies.py);
- ``overload``: one replica per model past capacity, the overload relaxation off and on (overload.py);
- ``shipped``: configs/mai-emulated.yaml as shipped under a burst (shipped.py);
- ``real``: configs/mai-cpu.yaml past what two cores hold, relaxation on, the relaxed answers'
  accuracy (real.py)."""

from __future__ import annotations

from ...scenario import module_family
from . import overload, policies, real, shipped

SCENARIO = module_family(
    "autoscaling",
    (policies, "Autoscaling: per deployment and coupled", "autoscaling.json", "mai-emulated.yaml"),
    (overload, "Overload: relaxation off and on", "autoscaling/overload.json", "mai-emulated.yaml"),
    (
        shipped,
        "The emulated config as shipped under a burst",
        "autoscaling/shipped.json",
        "mai-emulated.yaml",
    ),
    (
        real,
        "Overload on the real stack: relaxed answers' accuracy",
        "autoscaling/real-stack.json",
        "mai-cpu.yaml",
    ),
)
