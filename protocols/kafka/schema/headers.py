"""Schema table: the request and response headers (RequestHeader.json, ResponseHeader.json).

Plain data.  The quirk that the request header's ClientId is NEVER a compact string, even in
header v2, is stated here as `flexible="none"` on that field; the codec honours it like any
other field attribute.  Header versions per API version come from `ApiSchema`.
"""

from .model import Field as F

REQUEST_HEADER_VALID_VERSIONS = "0-2"
REQUEST_HEADER_FLEXIBLE_VERSIONS = "2+"
REQUEST_HEADER = (
    F("RequestApiKey", "int16", "0+"),
    F("RequestApiVersion", "int16", "0+"),
    F("CorrelationId", "int32", "0+"),
    F("ClientId", "string", "1+", nullable="1+", ignorable=True, flexible="none"),
)

RESPONSE_HEADER_VALID_VERSIONS = "0-1"
RESPONSE_HEADER_FLEXIBLE_VERSIONS = "1+"
RESPONSE_HEADER = (F("CorrelationId", "int32", "0+"),)
