"""`rig tune`: race engine configurations across boots (space -> plan -> run -> rule -> result)."""
