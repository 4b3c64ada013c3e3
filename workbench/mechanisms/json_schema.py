"""Published JSON Schemas of the workbench's records, generated from their types."""

from __future__ import annotations

from pydantic import TypeAdapter

__all__ = ["published_schema"]


def published_schema(kind: type, name: str, version: int, exit_codes: dict[int, str]) -> dict:
    """The JSON Schema of a record type (a dataclass whose to_dict() adds exit_code), with
    its identity and version pinned."""
    schema = TypeAdapter(kind).json_schema()
    schema["properties"]["exit_code"] = {
        "type": "integer", "enum": sorted(exit_codes),
        "description": "; ".join(f"{code} {meaning}" for code, meaning in exit_codes.items())}
    schema["required"] = [*schema.get("required", []), "exit_code"]
    schema["properties"]["schema_version"]["const"] = version
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://quant-workbench/schemas/{name}-v{version}.schema.json",
            **schema}
