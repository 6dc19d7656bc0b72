"""How the loop gets action chunks: the client interface, in-process and worker-process clients."""
