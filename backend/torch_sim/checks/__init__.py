"""Each bring-up step's check: a program that fails before the step and works after it.

`<step>.py` is run in a fresh process whose backend is brought up to a step (see
`torch_sim.steps.BringUp`); the guide runs it before and after its step and shows what
happened. Importing a check runs it.
"""
