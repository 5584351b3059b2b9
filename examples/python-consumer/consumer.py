#!/usr/bin/env python3
"""A minimal third-party consumer of seqflow's log (docs/analytics.md).

It reads one topic in a consumer group with isolation level
read_committed, decodes each record by the message its seqflow-schema
header names, using only the descriptor set schemas/seqflow.binpb (no
generated code), prints it as one JSON line, and commits the record's
offset after the line is written: a restart resumes after the last line
printed; a crash between the print and the commit prints that record
again (at least once).
"""
import argparse
import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

# The value of every topic that holds one message, for a record without a
# seqflow-schema header. im.receipts.v1 holds two: its records need the
# header (or seqflow-event-type: read_receipt, delivery_receipt).
TOPIC_MESSAGES = {
    "im.uplink.v1": "seqflow.im.v1.Uplink",
    "im.sequenced.v1": "seqflow.im.v1.SequencedEvent",
    "im.duplicates.v1": "seqflow.im.v1.DuplicateAck",
    "im.offline.v1": "seqflow.im.v1.OfflineNotification",
    "im.deadletter.v1": "seqflow.im.v1.DeadLetter",
}


def message_classes(path):
    """Returns a function from a message's full name to its Python class."""
    with open(path, "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for fd in files.file:  # imports come before the files that use them
        pool.Add(fd)
    return lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--brokers", default="127.0.0.1:19092")
    p.add_argument("--group", required=True, help="consumer group: where to resume")
    p.add_argument("--topic", default="im.sequenced.v1")
    p.add_argument("--topic-prefix", default="", help="the deployment's SEQFLOW_TOPIC_PREFIX")
    p.add_argument("--descriptor-set", default="schemas/seqflow.binpb")
    p.add_argument("--max", type=int, default=0, help="stop after this many records (0: never)")
    p.add_argument("--idle-exit", type=float, default=0, help="stop after this many seconds without a record (0: never)")
    args = p.parse_args()

    message_class = message_classes(args.descriptor_set)
    consumer = Consumer({
        "bootstrap.servers": args.brokers,
        "group.id": args.group,
        # Never show records of aborted transactions (librdkafka's default,
        # stated so nobody weakens it).
        "isolation.level": "read_committed",
        # Commit only what was printed, below.
        "enable.auto.commit": False,
        # Where the group has no committed offset yet.
        "auto.offset.reset": "earliest",
    })
    last = None  # when the last record came; idle time counts from the first assignment

    def assigned(_consumer, _partitions):
        nonlocal last
        if last is None:
            last = time.monotonic()

    consumer.subscribe([args.topic_prefix + args.topic], on_assign=assigned)
    n = 0
    try:
        while not args.max or n < args.max:
            msg = consumer.poll(1.0)
            if msg is None:
                if args.idle_exit and last is not None and time.monotonic() - last > args.idle_exit:
                    break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            last = time.monotonic()
            headers = {k: (v or b"").decode("utf-8", "replace") for k, v in msg.headers() or []}
            schema = headers.get("seqflow-schema") or TOPIC_MESSAGES[args.topic]
            event = message_class(schema)()
            event.ParseFromString(msg.value())
            line = {
                "topic": msg.topic(),
                "partition": msg.partition(),
                "offset": msg.offset(),
                "key": (msg.key() or b"").decode("utf-8", "replace"),
                "type": headers.get("seqflow-event-type", ""),
                "schema": schema,
                "event": json_format.MessageToDict(event, preserving_proto_field_name=True),
            }
            print(json.dumps(line, ensure_ascii=False), flush=True)
            consumer.commit(message=msg, asynchronous=False)
            n += 1
    finally:
        consumer.close()  # leaves the group: its partitions move at once


if __name__ == "__main__":
    sys.exit(main())
