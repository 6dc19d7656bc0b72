"""The ROS-free, torch-free control core: scheduler, controller, chunking, perception, settings."""
