"""kombu's filesystem transport, with messages written atomically.

The stock transport creates `<name>.msg` and then writes into it; a consumer polling every
20 ms can move and read the file in between, get zero bytes, and the worker dies on the JSON
error (seen here under load). Writing to a name the consumer ignores and renaming it into
place makes a message appear whole or not at all (rename is atomic within one folder).
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

ALIAS = "sy-filesystem"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = final + ".partial"  # does not end in .msg: consumers skip it
        try:
            with open(partial, "wb") as fh:
                fh.write(str_to_bytes(dumps(payload)))
            os.rename(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


def register() -> None:
    TRANSPORT_ALIASES[ALIAS] = "config.runtime.broker:Transport"
