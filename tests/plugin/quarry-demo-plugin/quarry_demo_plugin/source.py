"""The `demo://bucket/prefix` source scheme: index roots whose objects live in a service standing
in for object storage — here a folder, ``$QUARRY_DEMO_SOURCE_ROOT/<bucket>/<key>`` — listed and
read through quarry's Source interface. The folder is the plugin's own option."""

import hashlib
from pathlib import Path

from quarry.core.errors import ParseError
from quarry.core.options import Option
from quarry.core.registry import SOURCES
from quarry.core.settings import Settings
from quarry.ingest.sources import BucketMissing, ObjectInfo, Source

OPTIONS = (Option("demo_source_root", required=True, help="the folder that holds the demo buckets"),)


class DemoSource(Source):
    scheme = "demo"

    def __init__(self, bucket: str):
        super().__init__(bucket)
        self.folder = Path(Settings.from_env().option("demo_source_root")) / bucket

    def _info(self, path: Path) -> ObjectInfo:
        data = path.read_bytes()
        stat = path.stat()
        key = path.relative_to(self.folder).as_posix()
        return ObjectInfo(key, len(data), stat.st_mtime, f"md5:{hashlib.md5(data).hexdigest()}:{len(data)}")

    def list(self, prefix: str):
        if not self.folder.is_dir():
            raise BucketMissing(f"demo://{self.bucket} does not exist")
        paths = sorted(p for p in self.folder.rglob("*") if p.is_file())
        for path in paths:
            if path.relative_to(self.folder).as_posix().startswith(prefix):
                yield self._info(path)

    def head(self, key: str):
        path = self.folder / key
        return self._info(path) if path.is_file() else None

    def get(self, key: str, sink):
        path = self.folder / key
        if not path.is_file():
            raise ParseError(f"demo://{self.bucket}/{key} is gone")
        info = self._info(path)
        sink.write(path.read_bytes())
        return info.identity, info.size, {}


SOURCES.add("demo", DemoSource, options=OPTIONS)
