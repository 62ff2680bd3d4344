"""Prefect tasks: thin wrappers over quarry's plain functions, one batch per task run."""
