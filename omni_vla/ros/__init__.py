"""The rclpy adapters: vla_node, its re-plan topics and service, Ctrl-C handling. They only translate."""
