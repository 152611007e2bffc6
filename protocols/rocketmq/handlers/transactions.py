"""END_TRANSACTION (37): a producer's commit (8) or rollback (12) of a half message.

The commitLogOffset of the request names the half message (message_id.py); the broker's
transaction service applies the decision once (repeats are harmless).  Clients send it oneway.
A half message of another producer group than the request's is refused (NO_PERMISSION): the
ACLs checked WRITE on the request's group only.

This module must never deliver a half message itself.
"""

from __future__ import annotations

from protocols.rocketmq.broker_api import BrokerLike, ConnectionLike
from protocols.rocketmq.codec import RemotingCommand, make_response
from protocols.rocketmq.errors import RequestCodeNotSupportedError, ResponseCode
from protocols.rocketmq.headers import ext_int


async def handle_end_transaction(broker: BrokerLike, conn: ConnectionLike,
                                 request: RemotingCommand) -> RemotingCommand:
    transactions = getattr(broker, "transactions", None)
    if transactions is None:
        raise RequestCodeNotSupportedError("transactions are not enabled on this broker")
    ext = request.ext_fields
    # The ACLs checked WRITE on this producer group's transactional id: the half message must
    # be the group's (Apache's broker refuses another group's too).
    await transactions.end(ext_int(ext, "commitLogOffset"), ext_int(ext, "commitOrRollback"),
                           producer_group=ext.get("producerGroup", ""))
    return make_response(request, ResponseCode.SUCCESS)
