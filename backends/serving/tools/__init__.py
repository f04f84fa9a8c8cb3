"""Tool calling for the chat endpoint: what a request offers, how the prompt shows it, how replies parse.

``spec.py`` checks ``tools``/``tool_choice`` into a ``ToolRequest``; ``template.py`` renders the tools and
the call history into the prompt (the model's own template when it takes ``tools``, else the Hermes
markup of ``markup.py``); ``parser.py`` reads ``<tool_call>`` blocks out of a finished reply and
``stream.py`` out of a streamed one; ``grammar.py`` builds the constraint that forces a call.
"""
