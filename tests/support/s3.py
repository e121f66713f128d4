"""An S3 endpoint for tests: moto's server on loopback, fake keys, a bucket per test."""

from __future__ import annotations

import socket

FAKE_KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def bucket_keys(s3, prefix: str = "") -> list[str]:
    pages = s3.client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]
