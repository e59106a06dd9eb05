"""Scenario 11: replay through botocore (S3 GetObject and DynamoDB GetItem), against a floor
that answers botocore's own ``before-send`` event from memory with the responses botocore
builds from the wire (no Stubber: the request is signed and the response parsed as live)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from bench import _peers
from bench._fixtures import dynamodb_item, s3_object
from bench._harness import Scenario, serve
from bench._replay import line_against_floor, time_contestant

COUNT = 500
ALL = range(COUNT)
SAMPLE = range(0, COUNT, COUNT // 10)
TARGET = 1.3


def clients(base: str, floor_from: Path | None) -> tuple[Any, Any]:
    import botocore.awsrequest
    import botocore.config
    import botocore.session
    import urllib3

    session = botocore.session.get_session()
    session.set_credentials("AKIDBENCH", "bench-secret")
    config = botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
    made = [
        session.create_client(service, region_name="us-east-1", endpoint_url=base, config=config)
        for service in ("s3", "dynamodb")
    ]
    if floor_from is not None:
        table = {
            (i.request.url, i.request.body): i.response
            for i in _peers.agenttape_interactions(floor_from)
        }

        def answer(request: Any, **kwargs: Any) -> Any:
            recorded = table[request.url, request.body or b""]
            raw = urllib3.HTTPResponse(
                body=io.BytesIO(recorded.body),
                headers=recorded.headers,
                status=recorded.status,
                reason=recorded.reason,
                preload_content=False,
                decode_content=False,
            )
            return botocore.awsrequest.AWSResponse(request.url, recorded.status, raw.headers, raw)

        for client in made:
            client.meta.events.register_first("before-send", answer)
    return made[0], made[1]


def calls(base: str, picked: range, floor_from: Path | None = None) -> _peers.Calls:
    state: dict[str, Any] = {}

    def run() -> list[bytes]:
        if "s3" not in state:
            state["s3"], state["dynamodb"] = clients(base, floor_from)
        s3, dynamodb = state["s3"], state["dynamodb"]
        out: list[bytes] = []
        for i in picked:
            out.append(s3.get_object(Bucket="bench-bucket", Key=f"obj-{i}")["Body"].read())
            item = dynamodb.get_item(TableName="bench", Key={"id": {"S": f"item-{i}"}})["Item"]
            out.append(json.dumps(item, sort_keys=True).encode())
        return out

    return run


def expected(picked: range) -> list[bytes]:
    out: list[bytes] = []
    for i in picked:
        out.append(s3_object(i))
        out.append(json.dumps(dynamodb_item(i), sort_keys=True).encode())
    return out


def main() -> None:
    scenario = Scenario(
        11,
        "Replay through botocore: S3 GetObject and DynamoDB GetItem",
        "µs/request",
        "floor",
        "bench.s11_botocore",
        processes=2,
    )
    work = scenario.dir
    cassette = work / "aws.msgpack"
    if not scenario.is_worker:
        with serve() as base:
            _peers.record_agenttape(cassette, calls(base, ALL))
            _peers.record_cassetter(work / "aws.cassetter.yaml", calls(base, ALL))
        _peers.write_vcrpy(work / "aws.vcrpy.yaml", _peers.agenttape_interactions(cassette))
        (work / "base").write_text(base)
    base = (work / "base").read_text()
    plan = [
        ("floor", _peers.no_cassette, calls(base, ALL, floor_from=cassette), ALL),
        ("agenttape", _peers.agenttape_opener(cassette), calls(base, ALL), ALL),
        (
            "cassetter",
            _peers.cassetter_opener(work / "aws.cassetter.yaml", body=True),
            calls(base, ALL),
            ALL,
        ),
        (
            "vcrpy",
            _peers.vcrpy_opener(work / "aws.vcrpy.yaml", body=True),
            calls(base, SAMPLE),
            SAMPLE,
        ),
    ]
    for name, opener, run, picked in plan:
        want = expected(picked)
        note = "" if picked is ALL else f"{len(want)} requests spread over the cassette"
        time_contestant(scenario, work, name, opener, run, want, len(want), note)
    if scenario.is_worker:
        return
    line_against_floor(
        scenario, work, TARGET, "Replay through botocore (S3 GetObject, DynamoDB GetItem)"
    )
    scenario.finish()


if __name__ == "__main__":
    main()
