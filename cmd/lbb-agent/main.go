// Command lbb-agent is the guest agent: PID 1 inside a sandbox, serving the agent protocol on
// the one channel its host gave it. It imports nothing of the server.
package main

func main() {}
