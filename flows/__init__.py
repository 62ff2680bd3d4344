"""Prefect flows: they only wire the tasks in tasks/."""
