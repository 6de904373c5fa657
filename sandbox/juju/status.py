"""`juju status` of the emulated model: the YAML-like structure and the table.

Pure functions over the model's state dict (sandbox.juju.model); the
controller's status() and format_status() call them.  A unit in error shows
workload "error" with the failed hook, like Juju; an application's status is
the one its leader set, else the most severe of its units' (Juju's order).
"""

from __future__ import annotations

from . import model as _model
from .model import Model


def model_status(data: dict) -> dict:
    """A `juju status --format=yaml`-like structure of a model's state."""
    m = Model(data)
    out = {"model": {"name": data["model"]["name"], "type": "iaas",
                     "controller": "sandbox", "cloud": "localhost",
                     "version": data["model"]["juju-version"]},
           "machines": {}, "applications": {}}
    for mid, mach in sorted(data["machines"].items(), key=lambda kv: int(kv[0])):
        ips = [mach["address"]] if mach.get("address") else []
        out["machines"][mid] = {"juju-status": {"current": "started"},
                                "dns-name": mach.get("address"),
                                "ip-addresses": ips,
                                "instance-id": mach.get("name"),
                                "hostname": mach.get("hostname"),
                                "base": {"name": "ubuntu",
                                         "channel": mach.get("base", "22.04")},
                                "network-interfaces": {mach.get("interface") or "eth0": {
                                    "ip-addresses": ips,
                                    "mac-address": mach.get("mac") or "", "is-up": True}}}

    def unit_status(u):
        rec = m.unit(u)
        w = dict(rec["workload"])
        ag = rec["agent"]
        if ag["status"] == "error":
            wl = {"current": "error", "message": ag["message"]}
            js = {"current": "idle"}
        else:
            wl = {"current": w.get("status"), "message": w.get("message", "")}
            js = {"current": ag["status"]}
            if ag.get("message"):
                js["message"] = ag["message"]
        if rec["life"] == "dying":
            js["current"] = js["current"] if ag["status"] == "executing" else "idle"
            js.setdefault("message", "dying")
        st = {"workload-status": wl, "juju-status": js,
              "leader": m.app(rec["app"]).get("leader") == u,
              "machine": rec.get("machine"), "public-address": m.unit_address(u),
              "life": rec["life"]}
        if rec.get("opened-ports"):
            st["open-ports"] = list(rec["opened-ports"])
        return st

    for name, app in sorted(data["applications"].items()):
        units = m.units_of(name)
        entry = {"charm": app["charm-name"], "charm-rev": app["charm-revision"],
                 "charm-origin": "local" if app["kind"] == "charm" else "emulated",
                 "exposed": False, "version": app.get("version") or "",
                 "subordinate": app["subordinate"]}
        if app.get("status"):
            entry["application-status"] = {"current": app["status"]["status"],
                                           "message": app["status"]["message"]}
        else:
            best = None
            for u in units:
                ws = unit_status(u)["workload-status"]
                if best is None or _model.SEVERITY.get(ws["current"], 0) > \
                        _model.SEVERITY.get(best["current"], 0):
                    best = ws
            if best is None:
                waiting = app["subordinate"] and not units
                best = {"current": "waiting" if app["subordinate"] else "unknown",
                        "message": "waiting for principal" if waiting else ""}
            entry["application-status"] = best
        rels = {}
        for rel in m.relations():
            for e, o in ((rel["endpoints"][0], rel["endpoints"][1]),
                         (rel["endpoints"][1], rel["endpoints"][0])):
                if e["app"] == name:
                    rels.setdefault(e["name"], []).append({"related-application": o["app"],
                                                           "interface": rel["interface"],
                                                           "scope": rel["scope"],
                                                           "id": rel["id"],
                                                           "life": rel["life"]})
        entry["relations"] = rels
        if app["subordinate"]:
            entry["subordinate-to"] = sorted({o["related-application"] for r in rels.values()
                                              for o in r if o["scope"] == "container"})
            entry["scale"] = len(units)
        else:
            entry["units"] = {}
            for u in units:
                us = unit_status(u)
                subs = {s: unit_status(s)
                        for s in sorted(data["units"], key=_model.unit_sort_key)
                        if data["units"][s].get("principal") == u}
                if subs:
                    us["subordinates"] = subs
                entry["units"][u] = us
            entry["scale"] = len(units)
        out["applications"][name] = entry
    return out


def format_status(st: dict) -> str:
    """A `juju status`-like table of model_status()'s structure."""
    lines = []

    def table(rows):
        widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            lines.append("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
        lines.append("")

    md = st["model"]
    table([["Model", "Controller", "Cloud/Region", "Version"],
           [md["name"], md["controller"], md["cloud"], md["version"]]])
    rows = [["App", "Version", "Status", "Scale", "Charm", "Rev", "Exposed", "Message"]]
    for name, a in st["applications"].items():
        ast = a["application-status"]
        rows.append([name, a["version"], ast["current"], a["scale"],
                     a["charm"], a["charm-rev"], "no", ast.get("message", "")])
    table(rows)
    rows = [["Unit", "Workload", "Agent", "Machine", "Public address", "Ports", "Message"]]

    def unit_row(u, us, indent):
        star = "*" if us["leader"] else ""
        rows.append([indent + u + star, us["workload-status"]["current"],
                     us["juju-status"]["current"], (us["machine"] or "") if not indent else "",
                     us["public-address"] or "", ",".join(us.get("open-ports", [])),
                     us["workload-status"].get("message", "")])

    for name, a in st["applications"].items():
        for u, us in a.get("units", {}).items():
            unit_row(u, us, "")
            for s, ss in us.get("subordinates", {}).items():
                unit_row(s, ss, "  ")
    if len(rows) > 1:
        table(rows)
    rows = [["Machine", "State", "Address", "Inst id", "Base", "AZ", "Message"]]
    for mid, mach in st["machines"].items():
        rows.append([mid, mach["juju-status"]["current"], mach["dns-name"] or "",
                     mach["instance-id"], f"ubuntu@{mach['base']['channel']}", "", ""])
    if len(rows) > 1:
        table(rows)
    return "\n".join(lines).rstrip() + "\n"
