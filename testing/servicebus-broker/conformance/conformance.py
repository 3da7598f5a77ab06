"""Drives the test broker with Microsoft's Python SDK (azure-servicebus).

    python conformance.py CONNECTION_STRING QUEUE_PREFIX TOPIC SUBSCRIPTION

(CONNECTION_STRING may instead come from the environment variable
SERVICEBUS_CONNECTION_STRING, then pass "-" for it.) Each check uses its own
queue, QUEUE_PREFIX-<check>: send, schedule, peek, complete, abandon,
dead-letter, renew, schedule-cancel, defer, and the session-enabled
(requires_session) sessions, session-state, next-session; SUBSCRIPTION of
TOPIC must route by the rule `sys.Label = 'routed'` only (no $Default rule).

Receives are receive-and-delete where a check does not need a lock. The
peek-lock checks (complete, abandon, dead-letter, renew-lock, defer)
settle on the receive link as the SDK does (receiver settle mode second:
the broker must settle back with the outcome) and read the lock token from
the delivery tag (16 bytes, .NET GUID byte order).

Prints one line per check, `ok <name>` or `FAIL <name>: why`, and exits 1
when any failed.
"""

import datetime
import faulthandler
import os
import sys
import time
import traceback
import uuid

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import ServiceBusError, SessionCannotBeLockedError

DELETE = ServiceBusReceiveMode.RECEIVE_AND_DELETE
WAIT = 5  # seconds a receive waits for a message
CHECK_TIMEOUT = 30  # seconds a check may take before the script dumps its stacks and exits


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
    

def send_one(client, queue, text):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(new_message(text))


def check_complete(client, queue):
    send_one(client, queue, "done")
    with client.get_queue_receiver(queue) as receiver:
        message = receive_one(receiver)
        expect(body_of(message) == "done", f"body {body_of(message)!r}")
        expect(message.lock_token is not None, "no lock token")
        expect(message.locked_until_utc is not None, "no locked-until time")
        expect(message.delivery_count == 0, f"delivery count {message.delivery_count} on the first delivery")
        receiver.complete_message(message)
        # Completed: gone for good, also after the lock would have ended.
        expect_empty(receiver)
    with client.get_queue_receiver(queue, receive_mode=DELETE) as receiver:
        expect_empty(receiver)


def check_abandon(client, queue):
    send_one(client, queue, "again")
    with client.get_queue_receiver(queue) as receiver:
        first = receive_one(receiver)
        receiver.abandon_message(first)
        second = receive_one(receiver)
        expect(body_of(second) == "again", f"body {body_of(second)!r}")
        expect(second.sequence_number == first.sequence_number, "an abandoned message came back as another")
        expect(second.delivery_count == 1, f"delivery count {second.delivery_count} after one abandon")
        expect(second.lock_token != first.lock_token, "a new delivery kept the old lock token")
        receiver.complete_message(second)


def check_dead_letter(client, queue):
    send_one(client, queue, "poison")
    with client.get_queue_receiver(queue) as receiver:
        message = receive_one(receiver)
        receiver.dead_letter_message(message, reason="bad-input", error_description="field x is missing")
        expect_empty(receiver)
    with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as receiver:
        dead = receive_one(receiver)
        expect(body_of(dead) == "poison", f"body {body_of(dead)!r}")
        expect(dead.dead_letter_reason == "bad-input", f"reason {dead.dead_letter_reason!r}")
        expect(
            dead.dead_letter_error_description == "field x is missing",
            f"description {dead.dead_letter_error_description!r}",
        )
        receiver.complete_message(dead)
        expect_empty(receiver)


def check_renew_lock(client, queue):
    send_one(client, queue, "long job")
    with client.get_queue_receiver(queue) as receiver:
        message = receive_one(receiver)
        before = message.locked_until_utc
        time.sleep(1.1)
        after = receiver.renew_message_lock(message)
        expect(after > before, f"renewed lock ends {after}, before it ended {before}")
        expect(message.locked_until_utc == after, "the message's locked-until was not updated")
        receiver.complete_message(message)
        expect_empty(receiver)


def check_topic_routing(client, topic, subscription):
    with client.get_topic_sender(topic) as sender:
        sender.send_messages([new_message("skipped", subject="other"), new_message("wanted", subject="routed")])
    with client.get_subscription_receiver(topic, subscription, receive_mode=DELETE) as receiver:
        message = receive_one(receiver)
        expect(body_of(message) == "wanted", f"body {body_of(message)!r}")
        expect(message.subject == "routed", f"subject {message.subject!r}")
        expect_empty(receiver)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc)


def check_sessions(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(
            [
                new_message("a1", session_id="a"),
                new_message("b1", session_id="b"),
                new_message("a2", session_id="a"),
                new_message("a3", session_id="a"),
            ]
        )
    with client.get_queue_receiver(queue, session_id="a", receive_mode=DELETE) as receiver:
        expect(receiver.session.session_id == "a", f"session id {receiver.session.session_id!r}")
        locked_until = receiver.session.locked_until_utc
        expect(locked_until is not None and locked_until > utc_now(), f"session locked until {locked_until}")
        # Only session a's messages, in order.
        texts = []
        while len(texts) < 3:
            messages = receiver.receive_messages(max_message_count=3 - len(texts), max_wait_time=WAIT)
            expect(messages, f"expected session a's messages, got {texts}")
            texts += [body_of(m) for m in messages]
            for message in messages:
                expect(message.session_id == "a", f"session id of {body_of(message)}: {message.session_id!r}")
        expect(texts == ["a1", "a2", "a3"], f"received {texts}")
        expect_empty(receiver)
        # The session is locked: another receiver cannot have it.
        try:
            with client.get_queue_receiver(queue, session_id="a", receive_mode=DELETE) as other:
                other.receive_messages(max_message_count=1, max_wait_time=1)
            raise CheckFailed("a second receiver locked session a")
        except SessionCannotBeLockedError:
            pass
    # A receiver without a session is refused on a session-enabled queue.
    try:
        with client.get_queue_receiver(queue, receive_mode=DELETE) as plain:
            plain.receive_messages(max_message_count=1, max_wait_time=1)
        raise CheckFailed("a receiver without a session was let in")
    except ServiceBusError:
        pass
    with client.get_queue_receiver(queue, session_id="b", receive_mode=DELETE) as receiver:
        message = receive_one(receiver)
        expect(body_of(message) == "b1", f"body {body_of(message)!r}")


def check_session_state(client, queue):
    with client.get_queue_receiver(queue, session_id="s", receive_mode=DELETE) as receiver:
        session = receiver.session
        expect(session.get_state() is None, f"state before any was set: {session.get_state()!r}")
        session.set_state(b"step-1")
        state = session.get_state()
        expect(state == b"step-1", f"state {state!r}")
        before = session.locked_until_utc
        time.sleep(1)
        renewed = session.renew_lock()
        expect(renewed > before, f"renewed lock until {renewed}, was until {before}")
        expect(session.locked_until_utc == renewed, "locked_until_utc not updated by renew_lock")
        session.set_state(None)
        expect(session.get_state() is None, "state not cleared")
    # The state is the session's, not the receiver's.
    with client.get_queue_receiver(queue, session_id="s", receive_mode=DELETE) as receiver:
        receiver.session.set_state("kept")
    with client.get_queue_receiver(queue, session_id="s", receive_mode=DELETE) as receiver:
        state = receiver.session.get_state()
        expect(state == b"kept", f"state after a new receiver {state!r}")


def check_next_session(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(new_message("n1", session_id="next"))
    with client.get_queue_receiver(
        queue, session_id=NEXT_AVAILABLE_SESSION, receive_mode=DELETE, max_wait_time=WAIT
    ) as receiver:
        expect(receiver.session.session_id == "next", f"session id {receiver.session.session_id!r}")
        message = receive_one(receiver)
        expect(body_of(message) == "n1", f"body {body_of(message)!r}")


def check_schedule_cancel(client, queue):
    # Far enough ahead for the requests before the early receive.
    at = utc_now() + datetime.timedelta(seconds=6)
    with client.get_queue_sender(queue) as sender:
        kept = sender.schedule_messages(new_message("kept"), at)
        dropped = sender.schedule_messages([new_message("dropped")], at)
        expect(len(kept) == 1 and len(dropped) == 1, f"sequence numbers {kept}, {dropped}")
        expect(kept[0] != dropped[0], f"the same sequence number twice: {kept}")
        sender.cancel_scheduled_messages(dropped)
        try:
            sender.cancel_scheduled_messages(dropped)
            raise CheckFailed("a cancelled message was cancelled again")
        except ServiceBusError:
            pass
    with client.get_queue_receiver(queue, receive_mode=DELETE) as receiver:
        peeked = receiver.peek_messages(max_message_count=10)
        expect([body_of(m) for m in peeked] == ["kept"], f"peeked {[body_of(m) for m in peeked]}")
        expect(peeked[0].sequence_number == kept[0], f"sequence number {peeked[0].sequence_number}, scheduled {kept}")
        early = receiver.receive_messages(max_message_count=1, max_wait_time=1)
        expect(not early or utc_now() >= at, f"{[body_of(m) for m in early]} came before its time")
        message = receive_one(receiver, wait=10)
        expect(body_of(message) == "kept", f"body {body_of(message)!r}")
        expect(utc_now() >= at, "received before its scheduled time")
        expect_empty(receiver)


def check_defer(client, queue):
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([new_message("deferred-1"), new_message("deferred-2")])
    sequences = []
    # Peek-lock; a settlement outcome is waited for 5 s (not 60), so that
    # a broker that never confirms fails the check instead of hanging it.
    with client.get_queue_receiver(queue, timeout=5) as receiver:
        for _ in range(2):
            message = receive_one(receiver)
            sequences.append(message.sequence_number)
            receiver.defer_message(message)
        # Deferred messages are not delivered again.
        expect_empty(receiver)
        deferred = receiver.receive_deferred_messages([sequences[0]])
        expect([body_of(m) for m in deferred] == ["deferred-1"], f"deferred {[body_of(m) for m in deferred]}")
        # Settled through $management (update-disposition) with the lock token it came with.
        receiver.complete_message(deferred[0])
    with client.get_queue_receiver(queue, receive_mode=DELETE) as receiver:
        deferred = receiver.receive_deferred_messages(sequences[1:])
        expect([body_of(m) for m in deferred] == ["deferred-2"], f"deferred {[body_of(m) for m in deferred]}")
        try:
            receiver.receive_deferred_messages(sequences[1:])
            raise CheckFailed("a deferred message was received twice in receive-and-delete")
        except ServiceBusError:
            pass
        expect(not receiver.peek_messages(max_message_count=10), "the queue is not empty")


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
        ("complete", lambda c: check_complete(c, f"{prefix}-complete")),
        ("abandon", lambda c: check_abandon(c, f"{prefix}-abandon")),
        ("dead-letter", lambda c: check_dead_letter(c, f"{prefix}-dead-letter")),
        ("renew-lock", lambda c: check_renew_lock(c, f"{prefix}-renew")),
        ("topic-routing", lambda c: check_topic_routing(c, topic, subscription)),
        ("sessions", lambda c: check_sessions(c, f"{prefix}-sessions")),
        ("session-state", lambda c: check_session_state(c, f"{prefix}-session-state")),
        ("next-session", lambda c: check_next_session(c, f"{prefix}-next-session")),
        ("schedule-cancel", lambda c: check_schedule_cancel(c, f"{prefix}-schedule-cancel")),
        ("defer", lambda c: check_defer(c, f"{prefix}-defer")),
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
            except Exception as error:  # a CheckFailed, or the SDK's own errors
                detail = "".join(traceback.format_exception_only(type(error), error)).strip()
                if isinstance(error, CheckFailed):
                    detail = str(error)
                else:
                    traceback.print_exc(file=sys.stderr)
                failed += 1
                print(f"FAIL {name}: {detail}", flush=True)
            finally:
                faulthandler.cancel_dump_traceback_later()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
