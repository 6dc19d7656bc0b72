"""omni_vla_policies: the reference VLA policy (torch): model, training, export, parity, runtime bench.

Never imported by the robot runtime; everything the robot needs travels in the exported bundle.
"""
