"""The run configuration's `endpoints` section: sides measured where they already run."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from workbench.mechanisms.yaml_io import StrictModel

__all__ = ["EndpointConfig", "EndpointsConfig", "Server"]


class Server(StrictModel):
    """An OpenAI-compatible server the workbench calls but does not start: its root URL and
    where its key is (an endpoint measured in place; the judge model)."""

    url: str = Field(description="The server's root, e.g. https://llm.internal:8000 (not /v1)")
    api_key_env: str | None = Field(
        default=None, description="Name of the environment variable holding the API key, "
                                  "sent as a bearer token; the key itself never appears in a "
                                  "config, record, log or MLflow")

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError(f"must be an http:// or https:// URL, got {v!r}")
        if "@" in v.split("/")[2] or "?" in v or "#" in v:
            raise ValueError("must not carry credentials (user:password@, or a ?key=... "
                             "query); name the key's environment variable in api_key_env")
        return v.rstrip("/").removesuffix("/v1")

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", v):
            raise ValueError("must be the name of an environment variable (letters, digits, "
                             "_), not the key itself")
        return v


class EndpointConfig(Server):
    """A model already served behind an OpenAI-compatible vLLM endpoint: measured where it
    runs, neither quantised nor started by the workbench (docs/scale.md)."""

    model: str | None = Field(default=None, description="The served model id; default: the "
                                                        "only one /v1/models lists")
    devices: int = Field(default=1, ge=1, description="Devices the deployment holds, for cost "
                                                      "per million tokens (not measurable)")


class EndpointsConfig(StrictModel):
    baseline: EndpointConfig | None = None
    candidate: EndpointConfig | None = None

    def of(self, role: str) -> EndpointConfig | None:
        return self.baseline if role == "baseline" else self.candidate

    def devices(self, role: str) -> int:
        ep = self.of(role)
        return ep.devices if ep is not None else 1
