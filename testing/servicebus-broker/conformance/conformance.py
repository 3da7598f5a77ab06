"""Drives the test broker with Microsoft's Python SDK (azure-servicebus).

    python conformance.py CONNECTION_STRING QUEUE_PREFIX TOPIC SUBSCRIPTION

(CONNECTION_STRING may instead come from the environment variable
SERVICEBUS_CONNECTION_STRING, then pass "-" for it.) Each check uses its own
queue, QUEUE_PREFIX-<check> (send, schedule, peek); SUBSCRIPTION of TOPIC
must route by the rule `sys.Label = 'routed'` only (no $Default rule).

Receives are receive-and-delete: peek-lock settlement (complete, abandon,
dead-letter) and lock renewal are not checked yet, because the broker does
not pass them. pyamqp settles a peek-locked message with an unsettled
disposition and waits for the broker to settle it (receiver settle mode
second), which the broker never does; and the SDK reads the lock token from
the delivery tag (16 bytes), where the broker's tag is fe2o3-amqp's own.

Prints one line per check, `ok <name>` or `FAIL <name>: why`, and exits 1
when any failed. Sessions are out of scope (the broker has none).
"""

import datetime
import faulthandler
import os
import sys
import time
import traceback
import uuid

from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode

DELETE = ServiceBusReceiveMode.RECEIVE_AND_DELETE
WAIT = 5  # seconds a receive waits for a message
CHECK_TIMEOUT = 15  # seconds a check may take before the script dumps its stacks and exits


class CheckFailed(Exception):
    pass


def expect(condition, why):
    if not condition:
        raise CheckFailed(why)


def body_of(message):
    return b"".join(message.body).decode()


def receive_one(receiver, wait=WAIT):
    messages = receiver.receive_messages(max_message_count=1, max_wait_time=wait)
    expect(len(messages) == 1, f"expected one message within {wait} s, got {len(messages)}")
    return messages[0]


def expect_empty(receiver, wait=1):
    messages = receiver.receive_messages(max_message_count=1, max_wait_time=wait)
    expect(not messages, f"expected no message, got {[body_of(m) for m in messages]}")


def new_message(text, **kwargs):
    return ServiceBusMessage(text, message_id=str(uuid.uuid4()), **kwargs)


def check_send_receive(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(new_message("hello", subject="greeting", application_properties={"n": 7}))
    with client.get_queue_receiver(queue, receive_mode=DELETE) as receiver:
        message = receive_one(receiver)
        expect(body_of(message) == "hello", f"body {body_of(message)!r}")
        expect(message.subject == "greeting", f"subject {message.subject!r}")
        n = message.application_properties.get(b"n", message.application_properties.get("n"))
        expect(n == 7, f"application property n = {n!r}")
        expect(message.sequence_number is not None, "no sequence number")
        expect(message.enqueued_time_utc is not None, "no enqueued time")
        expect_empty(receiver)


def check_schedule(client, queue):
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=3)
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(new_message("later", scheduled_enqueue_time_utc=at))
    with client.get_queue_receiver(queue, receive_mode=DELETE) as receiver:
        early = receiver.receive_messages(max_message_count=1, max_wait_time=1)
        expect(not early, "the scheduled message came before its time")
        message = receive_one(receiver, wait=10)
        now = datetime.datetime.now(datetime.timezone.utc)
        expect(body_of(message) == "later", f"body {body_of(message)!r}")
        expect(now >= at, f"received at {now}, scheduled for {at}")


def check_peek(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([new_message("first"), new_message("second")])
    with client.get_queue_receiver(queue, receive_mode=DELETE) as receiver:
        peeked = receiver.peek_messages(max_message_count=10)
        expect([body_of(m) for m in peeked] == ["first", "second"], f"peeked {[body_of(m) for m in peeked]}")
        expect(peeked[0].sequence_number < peeked[1].sequence_number, "sequence numbers do not rise")
        # Peeking takes nothing away: both are still there to receive.
        for text in ["first", "second"]:
            message = receive_one(receiver)
            expect(body_of(message) == text, f"body {body_of(message)!r}, expected {text!r}")
    

def check_topic_routing(client, topic, subscription):
    with client.get_topic_sender(topic) as sender:
        sender.send_messages([new_message("skipped", subject="other"), new_message("wanted", subject="routed")])
    with client.get_subscription_receiver(topic, subscription, receive_mode=DELETE) as receiver:
        message = receive_one(receiver)
        expect(body_of(message) == "wanted", f"body {body_of(message)!r}")
        expect(message.subject == "routed", f"subject {message.subject!r}")
        expect_empty(receiver)


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    connection_string = argv[1]
    if connection_string == "-":
        connection_string = os.environ["SERVICEBUS_CONNECTION_STRING"]
    prefix, topic, subscription = argv[2], argv[3], argv[4]
    checks = [
        ("send-receive", lambda c: check_send_receive(c, f"{prefix}-send")),
        ("schedule", lambda c: check_schedule(c, f"{prefix}-schedule")),
        ("peek", lambda c: check_peek(c, f"{prefix}-peek")),
        ("topic-routing", lambda c: check_topic_routing(c, topic, subscription)),
    ]
    failed = 0
    # One retry: a broker bug should fail a check, not hang it in retries.
    with ServiceBusClient.from_connection_string(connection_string, retry_total=1) as client:
        for name, check in checks:
            print(f"running {name}", file=sys.stderr, flush=True)
            # A hung check ends the run with every thread's stack on stderr.
            faulthandler.dump_traceback_later(CHECK_TIMEOUT, exit=True)
            try:
                check(client)
                print(f"ok {name}", flush=True)
            except CheckFailed as failure:
                failed += 1
                print(f"FAIL {name}: {failure}", flush=True)
            except Exception as error:  # the SDK's own errors
                failed += 1
                detail = "".join(traceback.format_exception_only(type(error), error)).strip()
                print(f"FAIL {name}: {detail}", flush=True)
                traceback.print_exc(file=sys.stderr)
            finally:
                faulthandler.cancel_dump_traceback_later()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
