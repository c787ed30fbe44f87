package client

// A connection of a Cluster may own grants: what it acquired, enqueued for
// or waited on, and what it renewed by token (a renewal moves the lease to
// the connection that sends it). The server releases them when it sees
// the connection close, if it leads then, whatever node the client has
// moved on to. So a Cluster never closes such a connection to follow a
// not-leader answer: a node answers so while it takes over as leader, and
// one that has just lost leadership may regain it before it reads the
// close. The connection is set aside instead, open, until Close; the
// grants on it go on being renewed by token through the new connection,
// which takes them over, and Close releases what is left, as it would
// have.

// owns records that conn may now own a grant.
func (c *Cluster) owns(conn *Conn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owning == nil {
		c.owning = make(map[*Conn]struct{})
	}
	c.owning[conn] = struct{}{}
}

// leave stops using conn after a not-leader answer: it is retired, or,
// when it may own a grant, set aside until Close.
func (c *Cluster) leave(conn *Conn) {
	c.mu.Lock()
	_, owning := c.owning[conn]
	if !owning {
		c.mu.Unlock()
		c.retire(conn)
		return
	}
	if c.conn == conn {
		c.conn = nil
	}
	// Forget the connections set aside earlier that have failed since:
	// they hold nothing the client could still lose by closing them.
	kept := c.aside[:0]
	for _, a := range c.aside {
		if a.Err() == nil && a != conn {
			kept = append(kept, a)
		} else if a != conn {
			delete(c.owning, a)
		}
	}
	c.aside = append(kept, conn)
	c.mu.Unlock()
}

// closeAside closes the connections set aside; Close calls it with mu
// not held.
func closeAside(aside []*Conn) {
	for _, a := range aside {
		_ = a.Close()
	}
}
