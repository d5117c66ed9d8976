"""A LangChain deep agent whose shell and file tools run in our sandbox (`DeepAgentsSandbox`).

The chat model is a scripted fake (one ``execute`` tool call, then an answer), so this runs
offline; pass a real chat model to ``create_deep_agent`` for a real agent.

Run: python examples/deep_agent.py   (needs: pip install 'sandbox[langchain]')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deepagents import create_deep_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage

from sandbox.integrations.langchain import DeepAgentsSandbox


class ScriptedModel(GenericFakeChatModel):
    """Replays its messages; tools are accepted (and ignored: the script already names them)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self


def main() -> None:
    model = ScriptedModel(messages=iter([
        AIMessage(content="", tool_calls=[{
            "name": "execute", "id": "call-1",
            "args": {"command": "id -un; python -c 'print(6 * 7)' | tee /tmp/answer.txt"},
        }]),
        AIMessage(content="The sandbox says 6 * 7 = 42."),
    ]))
    with DeepAgentsSandbox() as backend:  # the default SandboxConfig: isolated, non-root
        agent = create_deep_agent(model=model, backend=backend)
        state = agent.invoke({"messages": [("user", "What is 6 * 7? Use the sandbox.")]})
        saved = backend.download_files(["/tmp/answer.txt"])[0].content
    for message in state["messages"]:
        if isinstance(message, ToolMessage):
            print(f"tool {message.name} in the sandbox said: {message.text.strip()!r}")
    print(f"agent: {state['messages'][-1].text}")
    print(f"/tmp/answer.txt in the sandbox held: {saved!r}")
    print(f"sandbox {backend.id}: {backend.sandbox.status.value}")


if __name__ == "__main__":
    main()
