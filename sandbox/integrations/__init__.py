"""Adapters that plug the sandbox into the frameworks users already run.

Each lives in its own module and needs its framework, installed with an extra; importing
``sandbox`` imports none of them:

* ``sandbox.integrations.inspect``: the ``"sandbox-docker"`` sandbox environment for Inspect AI
  (``pip install 'sandbox[inspect]'``), registered through Inspect's entry point.
* ``sandbox.integrations.langchain``: `DeepAgentsSandbox`, a LangChain deep agents backend
  (``pip install 'sandbox[langchain]'``).
* ``sandbox.integrations.pytest_plugin``: the ``sandbox`` fixtures for pytest, loaded through
  the ``pytest11`` entry point (they need pytest-asyncio: ``pip install 'sandbox[pytest]'``).
"""
