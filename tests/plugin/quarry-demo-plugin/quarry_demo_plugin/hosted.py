"""The `demo-hosted` embedding backend: an OpenAI-compatible embeddings API whose settings — base
URL, key, model, dimensions, batch size — the plugin declares itself; none is a quarry setting,
and nothing in quarry names them."""

import numpy as np

from quarry.core.options import Option
from quarry.core.registry import EMBEDDERS

OPTIONS = (
    Option("demo_api_url", required=True, help="the embeddings API's base URL"),
    Option("demo_api_key", secret=True, required=True, env=("DEMO_API_KEY",), help="its key"),
    Option("demo_api_model", default="demo-embed-small", help="the model asked for"),
    Option("demo_api_dim", type=int, default=32, ge=8, le=4096, help="dimensions asked for"),
    Option("demo_api_batch", type=int, default=16, ge=1, help="texts per request"),
)


class DemoHostedEmbedder:
    max_tokens = 0

    def __init__(self, url: str, key: str, model: str, dim: int, batch: int):
        from openai import OpenAI

        self.client = OpenAI(base_url=url, api_key=key, max_retries=2, timeout=30)
        self.model, self.dim, self.batch = model, dim, batch
        self.calls = 0

    def embed(self, texts):
        rows = []
        for start in range(0, len(texts), self.batch):
            reply = self.client.embeddings.create(
                model=self.model, input=list(texts[start : start + self.batch]), dimensions=self.dim
            )
            self.calls += 1
            rows.extend(d.embedding for d in sorted(reply.data, key=lambda d: d.index))
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1.0, norms)

    def count_tokens(self, texts):
        return [len(t.split()) for t in texts]


@EMBEDDERS.register("demo-hosted", options=OPTIONS)
def _demo_hosted(settings, **kwargs):
    return DemoHostedEmbedder(
        settings.option("demo_api_url"),
        settings.option("demo_api_key"),
        settings.option("demo_api_model"),
        settings.option("demo_api_dim"),
        settings.option("demo_api_batch"),
    )
