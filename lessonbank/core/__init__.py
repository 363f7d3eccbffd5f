"""The ground floor shared by the agent process, the workers and the CLI.

Settings, models, the Redis layout (constants), exceptions, redaction, the Redis client factory, the
run state machine, publishing a task by name, the lesson store protocol and its implementations,
embeddings and the instructions ranking. Nothing here imports the recorder, the workers or the face.
"""
