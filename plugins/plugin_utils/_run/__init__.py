"""One host's run, as phases over one run context and one run state (issue 16).

``context.RunContext`` is what the run was given and set up (frozen once built);
``state.RunState`` owns what the run decides (work items, outcomes, the queue, the stop);
``decisions`` holds the pure judgements every phase shares; the phases take (context, state).
"""
