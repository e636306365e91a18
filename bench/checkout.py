"""Put this checkout's root first on ``sys.path``; benchmark scripts import it before ``jaxmd_dp``.

``python bench/X.py`` puts ``bench/`` on the path, not the checkout, so without this an editable install of
another checkout would be imported, and an A/B run from two checkouts would time one code twice."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(ROOT))
