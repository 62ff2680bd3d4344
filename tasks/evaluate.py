"""The evaluation after an index run as a Prefect task: one plain function of quarry/eval/scoring.py."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from quarry.eval import scoring


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate_generation(
    store: str, sets: list[str], margin: float = 0.05, modes: list[str] | None = None, k: int = 10
) -> dict:
    """Score the store's question sets on its committed generation; flag drops beyond ``margin``."""
    logger = get_run_logger()
    out = scoring.evaluate_generation(store, list(sets), margin, tuple(modes or ("hybrid",)), k)
    for name in out["missing"]:
        logger.warning("no question set %s in the store: `quarry eval generate --name %s` makes one", name, name)
    for row in out["rows"]:
        logger.info(
            "eval %s %s on generation %s: recall@%d %.3f, mrr@%d %.3f",
            row["set_name"],
            row["mode"],
            row["generation"],
            k,
            row["recall"],
            k,
            row["mrr"],
        )
    for line in out["flagged"]:
        logger.warning("quality dropped: %s", line)
    if out["rows"]:
        create_markdown_artifact(
            key="quarry-eval",
            description="quarry evaluation after the index run",
            markdown="\n".join(
                [f"| set | mode | recall@{k} | mrr@{k} | flagged |", "|---|---|---|---|---|"]
                + [
                    f"| {r['set_name']} | {r['mode']} | {r['recall']:.3f} | {r['mrr']:.3f} | {r['flagged'] or ''} |"
                    for r in out["rows"]
                ]
            ),
        )
    return out
