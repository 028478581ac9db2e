"""boto3's side of benches/ec2.rs: lists one owner's pool on moto with the describe_instances
paginator and the driver's filters, and prints, as one JSON line, the CPU time of the listings
alone (time.process_time around them: not the interpreter's start-up, the imports or the warm-up).

    python ec2_boto3.py ENDPOINT POOL OWNER PAGE_SIZE ROUNDS
"""

import json
import sys
import time

import boto3
from botocore.config import Config

STATES = ["pending", "running", "shutting-down", "stopping", "stopped"]


def main():
    endpoint, pool, owner, page, rounds = sys.argv[1:6]
    page, rounds = int(page), int(rounds)
    client = boto3.client(
        "ec2",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="AKIDORCABENCH",
        aws_secret_access_key="orca-bench-secret",
        # One attempt, as the driver's listing when nothing fails.
        config=Config(retries={"total_max_attempts": 1}),
    )
    filters = [
        {"Name": "tag:orca", "Values": ["pool"]},
        {"Name": "tag:orca-pool", "Values": [pool]},
        {"Name": "tag:orca-owner", "Values": [owner]},
        {"Name": "instance-state-name", "Values": STATES},
    ]
    paginator = client.get_paginator("describe_instances")

    def listing():
        requests, ids = 0, []
        pages = paginator.paginate(Filters=filters, PaginationConfig={"PageSize": page})
        for p in pages:
            requests += 1
            for r in p.get("Reservations", []):
                ids.extend(i["InstanceId"] for i in r.get("Instances", []))
        return requests, ids

    listing()  # warm-up: connection, endpoint resolution, the service model's lazy parts
    requests, instances = 0, 0
    start = time.process_time()
    for _ in range(rounds):
        r, ids = listing()
        requests += r
        instances += len(ids)
    cpu = time.process_time() - start
    print(json.dumps({
        "cpu_s": cpu,
        "requests": requests,
        "instances": instances,
        "boto3": boto3.__version__,
    }))


if __name__ == "__main__":
    main()
