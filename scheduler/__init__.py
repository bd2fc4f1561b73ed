"""The scheduler: which request runs next on the compute workers.

`scheduler.policy` holds the pure queueing policies (no I/O, no clocks: time is an argument) that
both the scheduler service and the discrete-event simulator drive: the Bidaw dual queue (ready
queue FCFS + preparing queue in disk-HRRN order) and the FCFS baseline, built from one
`scheduler.policy.QueueConfig`. Around them: the dispatcher core (dispatcher.py), the relay of a
turn to its worker (relay.py), the members (members.py) and the thin gRPC servicer (service.py).
"""
