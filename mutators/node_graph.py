"""Walks over a schema's `Node` graph that stay linear in its size.

`$ref`s make the graph share nodes (a DAG) and loop (recursive schemas), so a walk that
follows every path is exponential: 24 levels of `{"anyOf": [{"$ref": next}, {"$ref": next}]}`
(1.8 KB) are 2^24 paths. Here each node is visited once and nothing recurses in Python (a
deep schema cannot overflow the stack).

- `per_node`: a fact computed once per node from its branches' facts (introspect.py), with
  loops cut the same way whichever node a question starts from.
- `unfolded_size`: how many nodes the graph has when every path is followed, or None when it
  loops; a compiled validator counts its work when this is large (`compile.py`).
- `in_place_cycle`: a loop of subschemas that apply each other to the same value (allOf,
  anyOf, not, if... through `$ref`s), which no check can finish: the tool is refused.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from mutators.schema import Node


class _InCycle:
    __slots__ = ()

    def __repr__(self) -> str:
        return "IN_CYCLE"


IN_CYCLE = _InCycle()  # what `of(branch)` gives for a branch that leads back to the node


def per_node(start: Node, name: str, branches: Callable[[Node], Iterable[Node]],
             compute: Callable[[Node, Callable[[Node], Any]], Any]) -> Any:
    """`start.memo[name]`, computing it first for `start` and every node below it (through
    `branches`) that lacks it: `compute(node, of)` reads a branch's fact as `of(branch)`.

    A branch in the node's own loop (the same strongly connected component: a `$ref` cycle
    through allOf/anyOf) gives IN_CYCLE rather than a fact, for every node of the loop, so a
    node's fact never depends on where a question entered the loop (Tarjan's algorithm,
    iterative)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[Node] = []
    on_stack: set[int] = set()

    def enter(node: Node) -> None:
        index[id(node)] = low[id(node)] = len(index)
        stack.append(node)
        on_stack.add(id(node))
        work.append((node, iter(branches(node))))

    work: list[tuple[Node, Any]] = []
    if name not in start.memo:
        enter(start)
    while work:
        node, pending = work[-1]
        for branch in pending:
            if name in branch.memo:
                continue
            if id(branch) not in index:
                enter(branch)
                break
            if id(branch) in on_stack:
                low[id(node)] = min(low[id(node)], index[id(branch)])
        else:
            work.pop()
            if work:
                parent = id(work[-1][0])
                low[parent] = min(low[parent], low[id(node)])
            if low[id(node)] == index[id(node)]:
                _finish_component(node, stack, on_stack, name, branches, compute)
    return start.memo[name]


def _finish_component(root: Node, stack: list[Node], on_stack: set[int], name: str,
                      branches: Callable[[Node], Iterable[Node]],
                      compute: Callable[[Node, Callable[[Node], Any]], Any]) -> None:
    """Pop `root`'s component off the stack and compute its members' facts (their branches
    outside the component are done)."""
    members: list[Node] = []
    while not members or members[-1] is not root:
        members.append(stack.pop())
        on_stack.discard(id(members[-1]))
    looped = {id(m) for m in members} if len(members) > 1 or any(
        b is root for b in branches(root)) else set()

    def of(branch: Node) -> Any:
        return IN_CYCLE if id(branch) in looped else branch.memo[name]

    for member in members:
        member.memo[name] = compute(member, of)


def subschemas(node: Node) -> list[Node]:
    """Every node `node` applies directly, to the value itself or to a part of it."""
    found = [*node.properties.values(), *(sub for _, sub in node.pattern_properties),
             *node.prefix_items, *node.any_of, *node.all_of,
             *(sub for _, sub in node.dependent_schemas)]
    found += [sub for sub in (node.additional, node.items, node.contains, node.not_, node.if_,
                              node.then, node.else_, node.property_names,
                              node.unevaluated_properties, node.unevaluated_items)
              if isinstance(sub, Node)]
    return found


def unfolded_size(root: Node, cap: int) -> int | None:
    """The number of nodes of the schema written out as a tree (every path followed once),
    counted up to `cap` (then `cap`); None when the graph loops (a recursive schema)."""
    done: dict[int, int] = {}
    active = {id(root)}
    work: list[tuple[Node, list[Node], int]] = [(root, subschemas(root), 0)]
    while work:
        node, subs, next_index = work[-1]
        if next_index < len(subs):
            sub = subs[next_index]
            work[-1] = (node, subs, next_index + 1)
            if id(sub) in active:
                return None
            if id(sub) not in done:
                active.add(id(sub))
                work.append((sub, subschemas(sub), 0))
            continue
        work.pop()
        active.discard(id(node))
        done[id(node)] = min(cap, 1 + sum(done[id(sub)] for sub in subs))
    return done[id(root)]


def in_place(node: Node) -> list[Node]:
    """The subschemas `node` applies to the value itself, not to a property or item of it."""
    found = [*node.all_of, *node.any_of, *(sub for _, sub in node.dependent_schemas)]
    found += [sub for sub in (node.not_, node.if_, node.then, node.else_) if sub is not None]
    return found


def in_place_cycle(root: Node) -> list[Node] | None:
    """A loop of in-place edges among the nodes reachable from `root`, as [a, b, ..., a], or
    None. A loop that enters a property or item is not one: each turn reads a smaller part of
    the value. One depth-first search over the in-place edges, started from every node
    (reached through any edge) that no earlier search finished: each node and edge once."""
    finished: set[int] = set()
    seen, everything = {id(root)}, [root]
    for node in everything:  # grows while it is walked: every reachable node once
        for sub in subschemas(node):
            if id(sub) not in seen:
                seen.add(id(sub))
                everything.append(sub)
        if id(node) not in finished and (cycle := _cycle_from(node, finished)) is not None:
            return cycle
    return None


def _cycle_from(start: Node, finished: set[int]) -> list[Node] | None:
    """An in-place loop met by a depth-first search from `start` (not through `finished`
    nodes, which lead to none), or None; the nodes it leaves are added to `finished`."""
    path, position = [start], {id(start): 0}  # the search's current path, node -> index
    pending = [iter(in_place(start))]
    while path:
        for sub in pending[-1]:
            if id(sub) in position:
                return path[position[id(sub)]:] + [sub]
            if id(sub) not in finished:
                position[id(sub)] = len(path)
                path.append(sub)
                pending.append(iter(in_place(sub)))
                break
        else:
            done = path.pop()
            pending.pop()
            del position[id(done)]
            finished.add(id(done))
    return None
