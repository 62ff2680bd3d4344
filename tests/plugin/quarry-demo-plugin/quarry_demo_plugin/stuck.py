"""Two formats whose parser never returns, as a broken library would: `.spin` files spin the CPU
forever, `.wait` files sleep forever without using it. quarry parses them in its process pool
(heavy) and must report each as failed within its limits, and index the rest of the tree."""

import time

from quarry.ingest.parsers import Format


def parse_spin(data: bytes, kind: str):
    n = 0
    while True:
        n += 1


def parse_wait(data: bytes, kind: str):
    while True:
        time.sleep(3600)


FORMATS = [
    Format(
        "spin",
        (".spin",),
        "quarry_demo_plugin.stuck:parse_spin",
        "quarry-demo-plugin",
        heavy=True,
        structure="none: its parser spins forever",
    ),
    Format(
        "wait",
        (".wait",),
        "quarry_demo_plugin.stuck:parse_wait",
        "quarry-demo-plugin",
        heavy=True,
        structure="none: its parser sleeps forever",
    ),
]
