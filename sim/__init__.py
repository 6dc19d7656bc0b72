"""MuJoCo task suite: Panda arm, language-conditioned tasks, scripted experts, datasets."""
