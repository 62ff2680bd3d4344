"""``s3://bucket/prefix``: S3 (and S3-compatible servers) through boto3, which reads the endpoint
and credentials from the standard AWS environment. Conditional puts are S3's ``If-None-Match`` /
``If-Match``; objects above :data:`quarry.store.objstore.MULTIPART_BYTES` go up in parts."""

from __future__ import annotations

import os

from quarry.core.cloud import s3_client
from quarry.core.errors import QuarryError
from quarry.core.registry import STORES
from quarry.core.storeurl import StoreURL
from quarry.store import objstore
from quarry.store.objstore import ObjectStore, PreconditionFailed


def _code(exc) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _status(exc) -> int:
    return int(getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


class S3ObjectStore(ObjectStore):
    def __init__(self, url: StoreURL):
        self.url = url
        self.bucket = url.bucket
        self.client = s3_client()

    def _key(self, key: str) -> str:
        return f"{self.url.prefix}/{key}" if self.url.prefix else key

    def _call(self, what: str, key: str, fn, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(Bucket=self.bucket, **kwargs)
        except ClientError as exc:
            if _status(exc) == 412 or _code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                raise PreconditionFailed(f"{self.url.join(key)}: {_code(exc) or 412}") from None
            if _code(exc) in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(self.url.join(key)) from None
            raise QuarryError(
                f"{what} {self.url.join(key)} failed: {_code(exc) or _status(exc)} "
                f"({exc.response.get('Error', {}).get('Message', '')})"
            ) from None
        except BotoCoreError as exc:  # no endpoint, no credentials, a timeout: the class and its message
            raise QuarryError(
                f"{what} {self.url.join(key)} failed: {type(exc).__name__}: {exc}; check the "
                "AWS_* environment (endpoint, region, credentials)"
            ) from None

    def get(self, key):
        try:
            r = self._call("reading", key, self.client.get_object, Key=self._key(key))
        except FileNotFoundError:
            return None
        return r["Body"].read(), r["ETag"]

    def put(self, key, data):
        return self._call("writing", key, self.client.put_object, Key=self._key(key), Body=data)["ETag"]

    def put_if_absent(self, key, data):
        return self._call("writing", key, self.client.put_object, Key=self._key(key), Body=data, IfNoneMatch="*")[
            "ETag"
        ]

    def put_if_match(self, key, data, etag):
        try:
            return self._call("writing", key, self.client.put_object, Key=self._key(key), Body=data, IfMatch=etag)[
                "ETag"
            ]
        except FileNotFoundError:  # S3 answers 404 when the object is gone: the condition fails too
            raise PreconditionFailed(self.url.join(key)) from None

    def upload_file(self, key, path, if_absent=True):
        cond = {"IfNoneMatch": "*"} if if_absent else {}
        size = os.path.getsize(path)
        if size <= objstore.MULTIPART_BYTES:
            with open(path, "rb") as fh:
                self._call("uploading", key, self.client.put_object, Key=self._key(key), Body=fh, **cond)
            return
        # Multipart, with the create-only condition on the completion (S3 checks it there).
        k = self._key(key)
        upload = self._call("uploading", key, self.client.create_multipart_upload, Key=k)["UploadId"]
        try:
            parts = []
            with open(path, "rb") as fh:
                for number in range(1, size // objstore.MULTIPART_BYTES + 2):
                    chunk = fh.read(objstore.MULTIPART_BYTES)
                    if not chunk:
                        break
                    r = self._call(
                        "uploading", key, self.client.upload_part, Key=k, UploadId=upload, PartNumber=number, Body=chunk
                    )
                    parts.append({"PartNumber": number, "ETag": r["ETag"]})
            self._call(
                "uploading",
                key,
                self.client.complete_multipart_upload,
                Key=k,
                UploadId=upload,
                MultipartUpload={"Parts": parts},
                **cond,
            )
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=k, UploadId=upload)
            except Exception:  # noqa: BLE001, S110 - the bucket's lifecycle rules clean it up otherwise
                pass
            raise

    def download_file(self, key, path):
        r = self._call("reading", key, self.client.get_object, Key=self._key(key))
        with open(path, "wb") as fh:
            for chunk in r["Body"].iter_chunks(8 << 20):
                fh.write(chunk)

    def list(self, prefix=""):
        keys = []
        base = self._key("")
        token = None
        while True:
            kwargs = {"Prefix": self._key(prefix)}
            if token:
                kwargs["ContinuationToken"] = token
            r = self._call("listing", prefix, self.client.list_objects_v2, **kwargs)
            keys += [o["Key"][len(base) :] for o in r.get("Contents", [])]
            if not r.get("IsTruncated"):
                return sorted(keys)
            token = r["NextContinuationToken"]

    def delete(self, keys):
        for i in range(0, len(keys), 1000):
            batch = [{"Key": self._key(k)} for k in keys[i : i + 1000]]
            if batch:
                self._call("deleting", keys[i], self.client.delete_objects, Delete={"Objects": batch, "Quiet": True})


@STORES.register("s3")
def _s3(url: StoreURL) -> ObjectStore:
    return S3ObjectStore(url)
