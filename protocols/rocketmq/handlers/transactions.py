"""END_TRANSACTION (37): a producer's commit (8) or rollback (12) of a half message.

The commitLogOffset of the request names the half message (message_id.py); the broker's
transaction service applies the decision once (repeats are harmless).  Clients send it oneway.

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
    await transactions.end(ext_int(ext, "commitLogOffset"), ext_int(ext, "commitOrRollback"))
    return make_response(request, ResponseCode.SUCCESS)
