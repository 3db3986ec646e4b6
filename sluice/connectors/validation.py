"""The connector operators' plain settings, checked at submit by sluice/graph.py (on the
client and again in the JobManager, without unpickling anything)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sluice.connectors.api import ConnectorConfigError, DeliveryGuarantee
from sluice.connectors.enumerators import ENUMERATORS

__all__ = ["ConnectorConfigError", "check_config"]

MAX_ENUMERATOR_CONFIG_BYTES = 4 * 1024 * 1024  # the JobManager keeps it in memory and in every checkpoint


def check_config(is_source: bool, p: dict[str, Any], code: Mapping[str, bytes]) -> None:
    if is_source:
        if "source" not in code:
            raise ConnectorConfigError("source", "a connector source needs its Source cloudpickled into code.source")
        spec = p.get("enumerator")
        if not isinstance(spec, dict) or not isinstance(spec.get("config"), dict):
            raise ConnectorConfigError("enumerator", "must be {'name': ..., 'config': {...}}")
        name = spec.get("name")
        cls = ENUMERATORS.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ConnectorConfigError(
                "enumerator.name", f"unknown enumerator {spec.get('name')!r}; known: {', '.join(ENUMERATORS)}"
            )
        if len(json.dumps(spec)) > MAX_ENUMERATOR_CONFIG_BYTES:
            raise ConnectorConfigError("enumerator.config", f"larger than {MAX_ENUMERATOR_CONFIG_BYTES} bytes")
        try:
            cls.check_config(spec["config"])
        except ConnectorConfigError as exc:
            raise ConnectorConfigError(f"enumerator.config.{exc.field}", exc.message) from None
        if not isinstance(p.get("bounded"), bool):
            raise ConnectorConfigError("bounded", f"must be true or false, got {p.get('bounded')!r}")
    else:
        if "sink" not in code:
            raise ConnectorConfigError("sink", "a connector sink needs its Sink cloudpickled into code.sink")
        if p.get("guarantee") not in tuple(DeliveryGuarantee):
            raise ConnectorConfigError(
                "guarantee", f"must be one of {', '.join(DeliveryGuarantee)}, got {p.get('guarantee')!r}"
            )
