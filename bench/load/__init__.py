"""`bidaw load`: many concurrent multi-turn chat sessions against the HTTP gateway for minutes,
while every service's RSS and the scheduler's queues are sampled; a verdict on errors, memory
flatness and queue bounds. driver.py sends, sampler.py watches, verdict.py judges (pure),
deploy.py starts a deployment sized to shed load, run.py ties them together."""
