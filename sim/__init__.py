"""MuJoCo task suite: Panda arm, language-conditioned tasks, scripted experts, datasets."""
import os


def _default_to_egl_without_a_display() -> None:
    """Pick EGL when no display exists and the user chose no backend.

    MuJoCo reads MUJOCO_GL once, when it is imported, and falls back to GLFW, which cannot make a context on a
    headless robot computer, CI runner or spawned worker: the first render then dies with an OpenGL FatalError.
    Every mujoco import of the project is inside this package, so setting it here runs first.
    """
    if "MUJOCO_GL" not in os.environ and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ["MUJOCO_GL"] = "egl"


_default_to_egl_without_a_display()
