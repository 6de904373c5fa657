"""One digest of what a step acted on: the step runs again when it changes."""
from __future__ import annotations

import hashlib
import json


def digest(*inputs) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()
