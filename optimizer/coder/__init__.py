"""The LLM micro coder (optional): a chat model writes one small diff for an action outside the rule library.

``LlmCoder(chat).rewrite(text, kernel, goal, target)`` asks the model (``chat.py``: an
OpenAI-compatible endpoint or a local GGUF) with ``prompt.py``'s request, applies the answer's
diff by content (``patch.py``) and checks the result (``gate.py``, ``region.py``); the step it
returns is an ``Edit`` plus a ``Candidate``, like a rule action's, and is verified the same way.
"""

from .chat import Chat, EndpointChat, LlamaChat
from .coder import ACTION_NAME, MAX_CHANGED_LINES, CoderStep, LlmCoder, goal_kind
from .errors import CoderError
from .patch import PatchError

__all__ = [
    "ACTION_NAME", "MAX_CHANGED_LINES", "Chat", "CoderError", "CoderStep", "EndpointChat", "LlamaChat", "LlmCoder",
    "PatchError", "goal_kind",
]
