#!/usr/bin/env python3
"""What a change stream costs DynamoDB Local per call (docs/performance.md, section 3).

Two tables of the product's shape (two GSIs, 1 KiB items), one with a NEW_AND_OLD_IMAGES
stream and one without, get the same mix as a job lifecycle (PutItem, a conditional
UpdateItem moving the item between indexes, a Query of an index) from 8 processes, in
alternating rounds of 8 s. Prints calls per second per table and round, and how many
stream records the instance holds by then: on DynamoDB Local a write to a table with a
stream costs more the more stream records it holds (of any table, deleted ones too), while
a table without one keeps its pace.

    .local/moto/bin/python scripts/ddb-local-stream-cost.py [endpoint]

Run it on a fresh DynamoDB Local (default http://127.0.0.1:8000). Needs boto3 (the moto
virtualenv `scripts/local-aws.sh install` makes has it).
"""
import multiprocessing as mp
import sys
import time
import uuid

import boto3

ENDPOINT = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000"
PROCESSES = 8
SECONDS = 8
ROUNDS = 4


def client():
    return boto3.client("dynamodb", endpoint_url=ENDPOINT, region_name="us-east-1",
                        aws_access_key_id="local", aws_secret_access_key="local")


def create(name, stream):
    keys = ["pk", "sk", "g1pk", "g1sk", "g2pk", "g2sk"]
    spec = dict(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                   {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in keys],
        GlobalSecondaryIndexes=[{
            "IndexName": f"gsi{i}",
            "KeySchema": [{"AttributeName": f"g{i}pk", "KeyType": "HASH"},
                          {"AttributeName": f"g{i}sk", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        } for i in (1, 2)],
        BillingMode="PAY_PER_REQUEST",
    )
    if stream:
        spec["StreamSpecification"] = {"StreamEnabled": True,
                                       "StreamViewType": "NEW_AND_OLD_IMAGES"}
    client().create_table(**spec)


def lifecycles(table):
    c, calls, stop = client(), 0, time.time() + SECONDS
    while time.time() < stop:
        pk = f"J#{uuid.uuid4().hex}"
        key = {"pk": {"S": pk}, "sk": {"S": "job"}}
        c.put_item(TableName=table, Item={**key, "args": {"S": "x" * 1024},
                                          "state": {"S": "available"},
                                          "g1pk": {"S": "Q#default"},
                                          "g1sk": {"S": uuid.uuid4().hex}})
        c.update_item(TableName=table, Key=key,
                      UpdateExpression="SET #s = :active, g2pk = :q, g2sk = :t REMOVE g1pk, g1sk",
                      ConditionExpression="#s = :available",
                      ExpressionAttributeNames={"#s": "state"},
                      ExpressionAttributeValues={":active": {"S": "active"},
                                                 ":available": {"S": "available"},
                                                 ":q": {"S": "A#default"},
                                                 ":t": {"S": uuid.uuid4().hex}})
        c.query(TableName=table, IndexName="gsi1", KeyConditionExpression="g1pk = :p",
                ExpressionAttributeValues={":p": {"S": "Q#default"}}, Limit=10)
        calls += 3
    return calls


if __name__ == "__main__":
    suffix = uuid.uuid4().hex[:8]
    tables = {f"plain-{suffix}": False, f"streamed-{suffix}": True}
    for name, stream in tables.items():
        create(name, stream)
    records = 0
    with mp.Pool(PROCESSES) as pool:
        for round_ in range(ROUNDS):
            for name, stream in tables.items():
                calls = sum(pool.map(lifecycles, [name] * PROCESSES))
                if stream:
                    records += calls * 2 // 3  # the PutItem and the UpdateItem
                print(f"round {round_}: stream {'on ' if stream else 'off'} "
                      f"{calls / SECONDS:7.0f} calls/s  (this run's stream records: {records})",
                      flush=True)
    for name in tables:
        client().delete_table(TableName=name)
