"""rig's Locust file: streaming OpenAI chat / completions, one JSONL record per request.

Run it only through `rig loadtest` (or with RIG_LOAD_CONFIG naming the rig.load.wire.LoadConfig it
wrote). The users are rig.load.client.users (LLMUser: closed loops, ArrivalUser: open-loop arrivals
and trace replays, ConversationUser: multi-turn chats); everything the process keeps is one
rig.load.client.process.ClientProcess, whose handlers Locust's events call. Every change rig makes
to Locust or urllib3 is in rig.load.client.patches, checked first: on a Locust or urllib3 release
they were not written for, this file refuses in one line.
"""

from locust import events

from rig.load.client import patches

patches.require_written_for()  # before anything reads Locust's internals

from rig.load.client.process import ClientProcess  # noqa: E402
from rig.load.client.users import bind_users  # noqa: E402

process = ClientProcess.start()
events.init.add_listener(process.on_init)
events.spawning_complete.add_listener(process.on_spawned)
events.test_stopping.add_listener(process.on_stopping)
events.report_to_master.add_listener(process.shipping.ship)
events.worker_report.add_listener(process.shipping.receive)
events.quitting.add_listener(process.on_quit)

LLMUser, ArrivalUser, ConversationUser = bind_users(process)
