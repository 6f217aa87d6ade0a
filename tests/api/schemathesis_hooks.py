"""Schemathesis hooks for tests/api/test_schemathesis.py (loaded through SCHEMATHESIS_HOOKS).

A rendered pytorchjob.yaml is a stream of several YAML documents (the PyTorchJob and its Service), served as
application/yaml; schemathesis' built-in YAML reader expects one document and raised in its worker thread.
"""

from __future__ import annotations

from typing import Any

import schemathesis
import yaml
from schemathesis.core.media_types import YAML_MEDIA_TYPES

# every YAML media type: schemathesis matches a response against its registered types by family, in registration
# order, so its own reader (registered first for text/yaml and friends) would still be picked for application/yaml


@schemathesis.deserializer(*YAML_MEDIA_TYPES, "application/yaml")
def yaml_stream(_ctx: Any, response: Any) -> Any:
    docs = list(yaml.safe_load_all(response.content))
    return docs[0] if len(docs) == 1 else docs
