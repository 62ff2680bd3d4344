"""The `max` fusion: each candidate's best min-max-normalised score over the retrievers."""


def max_fusion(hits, *, k, weights, alpha, adapt, depth):
    best = {}
    for items in hits.values():
        if not items:
            continue
        top, low = items[0][1], items[-1][1]
        for item, score in items:
            norm = (score - low) / (top - low) if top > low else 1.0
            best[item] = max(best.get(item, 0.0), norm)
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))


def register(registry):
    registry.add("max", max_fusion, normalised=False)
