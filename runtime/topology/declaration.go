package topology

// Declaration is one broker queue as queuey declares it: its name, its
// durability and its arguments. Every queuey queue is otherwise the same:
// not exclusive, not auto-delete; classic unless its arguments say quorum.
type Declaration struct {
	Name    string
	Durable bool
	Args    map[string]any
}

// QueueDeclarations are the declarations of logical queue q under prefix:
// its work queue and its dead-letter queue.
func QueueDeclarations(prefix string, q Queue) (work, dead Declaration) {
	name := WorkName(prefix, q.Name)
	return Declaration{Name: name, Durable: q.Durable, Args: WorkArgs(q)},
		Declaration{Name: DeadName(name), Durable: DeadDurable, Args: DeadArgs(q.Type)}
}

// Declarations lists the queues set declares: for every queue of the set, in
// order, its work queue and then its dead-letter queue. Hold, migration and
// divert queues are declared when they are needed, not with the set.
func Declarations(s Set) []Declaration {
	out := make([]Declaration, 0, 2*len(s.Queues))
	for _, q := range s.Queues {
		work, dead := QueueDeclarations(s.Prefix, q)
		out = append(out, work, dead)
	}
	return out
}
