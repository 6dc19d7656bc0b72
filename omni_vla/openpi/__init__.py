"""The OpenPI server side used in simulation and tests: a policy (the scripted expert or a bundle) served
over the websocket protocol (`omni-vla serve-openpi`)."""
