"""The learned systems `schedlab run` trains, evaluates and reports, in this order. Adding
one is a folder under `pipelines/systems/` (see `pipelines/system.py`) and a line here."""

from pipelines.system import Registry
from pipelines.systems.chic import CHIC
from pipelines.systems.dl2 import DL2
from pipelines.systems.harmony import HARMONY
from pipelines.systems.rltaps import RLTAPS

SYSTEMS = Registry([DL2, HARMONY, CHIC, RLTAPS])
