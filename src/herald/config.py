"""Settings, read from the environment only (HERALD_*), validated and bounded at start-up."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from herald import vocabulary


class Settings(BaseSettings):
    """Every value Herald reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="HERALD_", extra="ignore")

    environment: str = "development"
    database_url: str | None = None
    data_dir: Path = Path(".herald")
    db_pool_size: int = Field(default=10, ge=1, le=200)
    redis_url: str | None = None
    jwt_secret: str | None = None
    jwt_public_key: str | None = None
    kinds: str | None = None
    required_channels: str = ""

    lease_seconds: int = Field(default=60, ge=5, le=3600)
    max_attempts: int = Field(default=5, ge=1, le=100)
    retry_base_seconds: int = Field(default=30, ge=1, le=86_400)
    retry_max_seconds: int = Field(default=3600, ge=1, le=86_400)
    poll_interval_seconds: float = Field(default=1.0, gt=0, le=60)
    fanout_batch_size: int = Field(default=500, ge=1, le=10_000)
    backfill_max_age_hours: int = Field(default=72, ge=1, le=24 * 90)

    @field_validator("required_channels")
    @classmethod
    def _known_channels(cls, value: str) -> str:
        unknown = [c for c in _split(value) if c not in vocabulary.CHANNELS]
        if unknown:
            raise ValueError(f"unknown channel(s) in HERALD_REQUIRED_CHANNELS: {unknown}")
        return value

    @property
    def required_channel_set(self) -> frozenset[str]:
        return frozenset(_split(self.required_channels))

    @property
    def fanout_lease_seconds(self) -> int:
        # R-REAPER-7: a fan-out claim is released only after ten delivery leases.
        return 10 * self.lease_seconds

    @property
    def is_production(self) -> bool:
        return self.environment == "production"


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
