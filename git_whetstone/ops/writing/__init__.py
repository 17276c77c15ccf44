"""Writing to a store: capture, revise, attach, and what they share (a write in progress, the inputs
they accept, the changes one entry undergoes), and a hand edit checked and committed."""
