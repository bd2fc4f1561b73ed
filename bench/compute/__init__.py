"""The engine's figures against the hardware (`bidaw bench compute`): prefill and decode
throughput per dtype, the machine's read bandwidth, the decode roofline and a decode step's
profile."""
