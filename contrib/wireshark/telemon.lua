-- telemon.lua: Wireshark/tshark dissectors for the five wire protocols of telemon
-- (meter161, hmon, mono_counters, smon, rvos_sysinfo).
--
-- Install: copy this file into the personal Lua plugins folder that `tshark -G folders` names
-- ("Personal Lua Plugins", ~/.local/lib/wireshark/plugins/ on Linux), or load it once with
-- `tshark -X lua_script:telemon.lua ...`. See docs/wireshark.md.
--
-- Where it attaches:
--   * telemon's recordings (pcapng, docs/recordings.md): LINKTYPE_USER0..4 (147..151), one per protocol.
--     Every record is one read or write of a target's connection: messages split over several records
--     are put back together per connection and direction (the zero-length "telemon: connected" record
--     starts a new connection), so a message is decoded once, in the record that completes it, and the
--     records it spans say so. Use two passes (`tshark -2`) so that each record knows its messages.
--   * TCP: hmon, mono_counters, smon and rvos_sysinfo on their usual ports and by a heuristic on their
--     first bytes; TCP reassembly (desegment_len) puts messages split over segments together.
--
-- Written for the Lua 5.2 of Wireshark 4.0: no integer division or bit operators (the `bit` library),
-- 64-bit values through UInt64/Int64. A dissector never lets a Lua error escape: an unexpected one is
-- caught and shown as the expert note "telemon.bug" (the tests require that it never appears).

local VERSION = "0.1.0"

local function u16le(s, i)
    local a, b = s:byte(i, i + 1)
    return a + b * 256
end
local function i16le(s, i)
    local v = u16le(s, i)
    if v >= 32768 then v = v - 65536 end
    return v
end
local function u32le(s, i)
    local a, b, c, d = s:byte(i, i + 3)
    return a + b * 256 + c * 65536 + d * 16777216
end
local function i32le(s, i)
    local v = u32le(s, i)
    if v >= 2147483648 then v = v - 4294967296 end
    return v
end
local function u32be(s, i)
    local a, b, c, d = s:byte(i, i + 3)
    return ((a * 256 + b) * 256 + c) * 256 + d
end

local function hex(s)
    return (s:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

-- A printable preview of bytes, for the Info column.
local function preview(s, n)
    n = n or 60
    local t = s:sub(1, n):gsub("[%c\128-\255]", ".")
    if #s > n then t = t .. "…" end
    return t
end

---------------------------------------------------------------------------------------------------
-- Fields shared by the bookkeeping of every protocol: which frames a message spans.
---------------------------------------------------------------------------------------------------

-- Creates the protocol's spanning fields and expert infos.
local function common_fields(proto, abbr)
    local c = {}
    c.reassembled_in = ProtoField.framenum(abbr .. ".reassembled_in", "Message completed in frame")
    c.segment = ProtoField.framenum(abbr .. ".segment", "Frame holding part of this message")
    c.segment_count = ProtoField.uint32(abbr .. ".segment_count", "Frames this message spans")
    c.message_len = ProtoField.uint32(abbr .. ".message_length", "Message length")
    c.incomplete = ProtoField.bytes(abbr .. ".incomplete", "Bytes of a message the connection ends inside")
    c.undecoded = ProtoField.bytes(abbr .. ".undecoded", "Bytes after a fatal error (not decoded)")
    c.ef_malformed = ProtoExpert.new(abbr .. ".malformed", "Malformed " .. abbr .. " message",
        expert.group.MALFORMED, expert.severity.ERROR)
    c.ef_truncated = ProtoExpert.new(abbr .. ".truncated", "The connection ends inside a message",
        expert.group.MALFORMED, expert.severity.WARN)
    c.ef_reassembled = ProtoExpert.new(abbr .. ".reassembled", "Message reassembled from several reads",
        expert.group.REASSEMBLE, expert.severity.CHAT)
    c.ef_bug = ProtoExpert.new("telemon.bug." .. abbr, "telemon dissector bug",
        expert.group.UNDECODED, expert.severity.ERROR)
    return c
end

---------------------------------------------------------------------------------------------------
-- Render descriptions. Parsing (first pass, in frame order, with the connection's state) produces a
-- message table; rendering (any pass) turns it into tree items. Items:
--   {f = ProtoField, o = offset, l = length, v = value or nil, le = true, kids = {...}, label = text,
--    json = true (call the JSON dissector on the range), tvbtext = bytes (a new data source)}
---------------------------------------------------------------------------------------------------

local json_dissector = Dissector.get("json")

local function render_items(proto, tvb, tree, items, pinfo)
    for _, it in ipairs(items) do
        local ti
        local range = nil
        if it.lazy then
            local frames = {}
            for _, m in ipairs(it.lazy) do
                if m.done_in and frames[#frames] ~= m.done_in then table.insert(frames, m.done_in) end
            end
            it.v = table.concat(frames, ",")
        end
        if it.o and it.l and it.l > 0 and it.o + it.l <= tvb:len() then
            range = tvb(it.o, it.l)
        end
        if it.tvbtext then
            local t2 = ByteArray.new(it.tvbtext, true):tvb(it.tvbname or "Reassembled text")
            ti = tree:add(it.f, t2())
            if it.f2 then tree:add(it.f2, t2()) end
        elseif it.json then
            if range then
                local ok = pcall(json_dissector.call, json_dissector, range:tvb(), pinfo, tree)
                if not ok then tree:add(proto, range, "[JSON]") end
            end
        elseif it.f then
            if range and it.v ~= nil then
                ti = tree:add(it.f, range, it.v)
            elseif range then
                if it.le then ti = tree:add_le(it.f, range) else ti = tree:add(it.f, range) end
            elseif it.v ~= nil then
                ti = tree:add(it.f, it.v)
            end
        else
            if range then
                ti = tree:add(proto, range, it.label or "")
            else
                ti = tree:add(proto, it.label or "")
            end
        end
        if ti and it.text then ti:append_text(it.text) end
        if ti and it.generated then ti:set_generated() end
        if ti and it.kids then render_items(proto, tvb, ti, it.kids, pinfo) end
        if it.ex then
            local target = ti or tree
            target:add_proto_expert_info(it.ex[1], it.ex[2])
        end
    end
end

---------------------------------------------------------------------------------------------------
-- The engine: one dissector per protocol, fed by recordings (per-record streams) and TCP.
---------------------------------------------------------------------------------------------------

local f_comment = Field.new("frame.comment")
local f_interface = Field.new("frame.interface_id")
local f_number = Field.new("frame.number")
local f_encap = Field.new("frame.encap_type")

-- P = {proto, abbr, c (common fields), parse(s, pos, d, cs, dir) -> nil | len, msg,
--      render(msg, tvb, tree, pinfo), new_conn() -> cs, agent_dir(...)}
-- parse returns nil when the message at `pos` is not whole yet, else its length and a message table:
--   msg.items (render description), msg.info (Info column), msg.err (malformed: text),
--   msg.fatal (true: nothing after it on this direction can be decoded).
-- parse must change the connection state only when it returns a whole message.

local function add_msg_tree(P, tvb, tree, pinfo, msg)
    local st = tree:add(P.proto, tvb(), msg.title or P.proto.description)
    render_items(P.proto, tvb, st, msg.items or {}, pinfo)
    if msg.err then
        st:append_text(" [Malformed: " .. msg.err .. "]")
        st:add_proto_expert_info(P.c.ef_malformed, msg.err)
    end
    return st
end

local function set_info(pinfo, P, infos)
    pinfo.cols.protocol = P.colname
    if #infos > 0 then
        pinfo.cols.info = table.concat(infos, ", ")
    end
end

-- Recordings -------------------------------------------------------------------------------------

local function make_recording_dissector(P)
    local conns = {}      -- interface id -> connection state {n, dirs = {[0], [1]}, shared}
    local results = {}    -- frame number -> {msgs = {}, parts = {}, notes = {}}

    local function init()
        conns = {}
        results = {}
    end

    local function new_dir()
        return {buf = "", frames = {}, dead = false}
    end

    local function fresh_conn(iface, n)
        local cs = P.new_conn and P.new_conn() or {}
        cs.n = n
        cs.iface = iface
        cs.dirs = {[0] = new_dir(), [1] = new_dir()}
        return cs
    end

    -- The bytes still buffered on a direction end inside a message: mark them.
    local function flush_incomplete(d, res)
        if #d.buf > 0 and not d.dead then
            local note = {kind = "incomplete", bytes = d.buf, frames = {}}
            for _, fr in ipairs(d.frames) do table.insert(note.frames, fr.frame) end
            table.insert(res.notes, note)
        end
        d.buf = ""
        d.frames = {}
    end

    -- A zero-length record with telemon's comment: a connection starts or ends (from the postdissector).
    local function mark(pinfo, iface, comments)
        local n = pinfo.number
        if results[n] then return end
        local res = {msgs = {}, parts = {}, notes = {}}
        results[n] = res
        local cs = conns[iface]
        for _, text in ipairs(comments) do
            if text == "telemon: connected" then
                if cs then
                    flush_incomplete(cs.dirs[0], res)
                    flush_incomplete(cs.dirs[1], res)
                end
                cs = fresh_conn(iface, cs and (cs.n + 1) or 1)
                conns[iface] = cs
                res.connected = cs.n
            elseif text == "telemon: closed" or text == "telemon: peer closed" then
                if cs then
                    res.closed = text
                    flush_incomplete(cs.dirs[1], res)
                    if text == "telemon: closed" then flush_incomplete(cs.dirs[0], res) end
                end
            end
        end
    end

    local function process(tvb, pinfo)
        local n = pinfo.number
        local res = {msgs = {}, parts = {}, notes = {}}
        results[n] = res
        local iface = 0
        local fi = f_interface()
        if fi then iface = fi.value end
        local cs = conns[iface]
        if tvb:len() == 0 then return end
        if not cs then
            -- A recording cut at its start (or a file written by another tool): a connection begins here.
            cs = fresh_conn(iface, 1)
            conns[iface] = cs
        end
        local dir = pinfo.p2p_dir
        if dir ~= 0 then dir = 1 end   -- 1 inbound (from the peer), 0 outbound (telemon's writes)
        res.dir = dir
        local d = cs.dirs[dir]
        local data = tvb:raw()
        if d.dead then
            table.insert(res.notes, {kind = "undecoded", o = 0, l = #data})
            return
        end
        local base = #d.buf
        d.buf = d.buf .. data
        table.insert(d.frames, {frame = n, off = 0, n = #data, start = base})
        local pos = 1
        while pos <= #d.buf do
            local len, msg = P.parse(d.buf, pos, d, cs, dir)
            if not len then break end
            if len < 1 then len = 1 end
            if pos + len - 1 > #d.buf then len = #d.buf - pos + 1 end
            msg.done_in = n
            -- The frames holding bytes pos .. pos+len-1 of the buffer.
            local first, last = pos - 1, pos + len - 2   -- 0-based
            msg.frames = {}
            for _, fr in ipairs(d.frames) do
                local a, b = fr.start, fr.start + fr.n - 1
                if b >= first and a <= last then
                    table.insert(msg.frames, fr.frame)
                    if fr.frame ~= n then
                        table.insert(results[fr.frame].parts, msg)
                    end
                end
            end
            if #msg.frames == 1 and msg.frames[1] == n then
                -- Wholly in this record: at its offset in the record.
                msg.offset = first - base
            else
                msg.bytes = d.buf:sub(pos, pos + len - 1)
            end
            msg.len = len
            table.insert(res.msgs, msg)
            pos = pos + len
            if msg.fatal then
                d.dead = true
                if pos <= #d.buf then
                    local rest_from = (pos - 1) - base
                    if rest_from < 0 then rest_from = 0 end
                    table.insert(res.notes, {kind = "undecoded", o = rest_from, l = #data - rest_from})
                end
                d.buf = ""
                d.frames = {}
                return
            end
        end
        -- Keep the bytes not yet part of a whole message.
        local consumed = pos - 1
        if consumed > 0 then
            d.buf = d.buf:sub(pos)
            local kept = {}
            for _, fr in ipairs(d.frames) do
                local a, b = fr.start, fr.start + fr.n - 1
                if b >= consumed then
                    local cut = consumed - a
                    if cut > 0 then
                        fr.off = fr.off + cut
                        fr.n = fr.n - cut
                        fr.start = consumed
                    end
                    fr.start = fr.start - consumed
                    table.insert(kept, fr)
                end
            end
            d.frames = kept
        end
        if #d.buf > 0 then
            res.pending = true
        end
        if P.after_frame then P.after_frame(cs, dir, res) end
    end

    local function render(tvb, pinfo, tree)
        local res = results[pinfo.number]
        if not res then return end
        local c = P.c
        local infos = {}
        if res.connected then
            tree:add(P.proto, "[" .. P.colname .. " connection " .. res.connected .. " starts]")
            table.insert(infos, "connection " .. res.connected .. " starts")
        end
        for _, msg in ipairs(res.parts) do
            local t = tree:add(P.proto, tvb(), P.proto.description .. " [part of a message]")
            if not msg.done_in then break end
            t:add(c.reassembled_in, msg.done_in)
            table.insert(infos, "[part of a message completed in frame " .. msg.done_in .. "]")
        end
        for _, msg in ipairs(res.msgs) do
            local mtvb
            if msg.bytes then
                mtvb = ByteArray.new(msg.bytes, true):tvb("Reassembled " .. P.colname .. " message")
            else
                mtvb = tvb(msg.offset, msg.len):tvb()
            end
            local st = add_msg_tree(P, mtvb, tree, pinfo, msg)
            if msg.bytes then
                st:add(c.segment_count, #msg.frames):set_generated()
                for _, f in ipairs(msg.frames) do st:add(c.segment, f):set_generated() end
                st:add(c.message_len, msg.len):set_generated()
                st:add_proto_expert_info(c.ef_reassembled,
                    "Message of " .. msg.len .. " bytes reassembled from " .. #msg.frames .. " reads")
            end
            if msg.info then table.insert(infos, msg.info) end
        end
        for _, note in ipairs(res.notes) do
            if note.kind == "incomplete" then
                local t = tree:add(P.proto, P.proto.description .. " [the connection ends inside a message]")
                t:add(c.incomplete, ByteArray.new(note.bytes, true):tvb("Incomplete message")())
                t:add_proto_expert_info(c.ef_truncated,
                    #note.bytes .. " bytes of an incomplete message (frames " .. table.concat(note.frames, ",") .. ")")
                table.insert(infos, "[connection ends inside a message]")
            elseif note.kind == "undecoded" then
                if note.l > 0 then
                    local t = tree:add(c.undecoded, tvb(note.o, note.l))
                    t:add_proto_expert_info(c.ef_malformed, "not decoded: an earlier error on this direction is fatal")
                    table.insert(infos, "[not decoded after a fatal error]")
                end
            end
        end
        if res.closed then table.insert(infos, (res.closed:gsub("^telemon: ", ""))) end
        if #res.msgs == 0 and #res.parts == 0 and res.pending then
            tree:add(P.proto, tvb(), P.proto.description .. " [start of a message, continued in a later frame]")
            table.insert(infos, "[start of a message]")
        end
        set_info(pinfo, P, infos)
    end

    local function dissect(tvb, pinfo, tree)
        -- Without a tree (the first pass of `tshark -2`), no field tells the interface: the frame is
        -- processed on the first dissection that has them (frames are then dissected in order).
        if tvb:len() == 0 then return 0 end   -- a marker: see the postdissector
        if results[pinfo.number] == nil and f_number() == nil then return tvb:len() end
        local ok, err = pcall(function()
            if results[pinfo.number] == nil then
                process(tvb, pinfo)
            end
            render(tvb, pinfo, tree)
        end)
        if not ok then
            tree:add_proto_expert_info(P.c.ef_bug, tostring(err))
        end
        return tvb:len()
    end

    local function marker(pinfo, tree, iface, comments)
        local ok, err = pcall(function()
            mark(pinfo, iface, comments)
            render(nil, pinfo, tree)
        end)
        if not ok then tree:add_proto_expert_info(P.c.ef_bug, tostring(err)) end
    end

    return dissect, init, marker
end

-- TCP --------------------------------------------------------------------------------------------

local function make_tcp_dissector(P)
    local convs = {}     -- tcp stream -> {cs, dirs}
    -- frame -> the first pass's parses of the bytes TCP handed over in that frame: {head = first bytes,
    -- len, msgs = {{offset, len, ...}}, stop, rest, dead}. A later pass may hand over fewer bytes (TCP
    -- then cuts a reassembled PDU where the first pass said its messages stopped): it gets the parse
    -- of the bytes it is a prefix of, and the messages that lie within them.
    local cache = {}
    local HEAD = 64

    local function cached(number, s)
        local head = s:sub(1, HEAD)
        local best
        for _, e in ipairs(cache[number] or {}) do
            if e.len >= #s and e.head:sub(1, #head) == head then
                if e.len == #s then return e end
                best = best or e
            end
        end
        return best
    end

    local function init()
        convs = {}
        cache = {}
    end

    local function dissect(tvb, pinfo, tree)
        local consumed = 0
        local ok, err = pcall(function()
            local s = tvb:raw()
            local entry = cached(pinfo.number, s)
            if not entry then
                local a = tostring(pinfo.src) .. ":" .. pinfo.src_port
                local b = tostring(pinfo.dst) .. ":" .. pinfo.dst_port
                local sid = (a < b) and (a .. "|" .. b) or (b .. "|" .. a)
                local conv = convs[sid]
                if not conv then
                    conv = P.new_conn and P.new_conn() or {}
                    conv.dirs = {[0] = {buf = "", dead = false}, [1] = {buf = "", dead = false}}
                    conv.first_src = tostring(pinfo.src) .. ":" .. pinfo.src_port
                    convs[sid] = conv
                end
                -- dir 1: from the server-role side (the peer in a recording), 0: from the client role.
                local dir
                if P.tcp_dir then
                    dir = P.tcp_dir(conv, pinfo, s)
                else
                    dir = (tostring(pinfo.src) .. ":" .. pinfo.src_port == conv.first_src) and 0 or 1
                end
                local d = conv.dirs[dir]
                entry = {msgs = {}, dead = d.dead, head = s:sub(1, HEAD), len = #s}
                if not d.dead then
                    local pos = 1
                    while pos <= #s do
                        local len, msg = P.parse(s, pos, d, conv, dir)
                        if not len then break end
                        if len < 1 then len = 1 end
                        if pos + len - 1 > #s then len = #s - pos + 1 end
                        msg.offset, msg.len = pos - 1, len
                        table.insert(entry.msgs, msg)
                        pos = pos + len
                        if msg.fatal then
                            d.dead = true
                            entry.rest = pos - 1
                            pos = #s + 1
                        end
                    end
                    entry.stop = pos - 1
                end
                cache[pinfo.number] = cache[pinfo.number] or {}
                table.insert(cache[pinfo.number], entry)
            end
            local infos = {}
            for _, msg in ipairs(entry.msgs) do
                if msg.offset + msg.len <= tvb:len() then
                    add_msg_tree(P, tvb(msg.offset, msg.len):tvb(), tree, pinfo, msg)
                    if msg.info then table.insert(infos, msg.info) end
                end
            end
            if entry.dead then
                local t = tree:add(P.c.undecoded, tvb())
                t:add_proto_expert_info(P.c.ef_malformed, "not decoded: an earlier error on this direction is fatal")
                consumed = tvb:len()
            elseif entry.rest then
                if entry.rest < tvb:len() then
                    local t = tree:add(P.c.undecoded, tvb(entry.rest))
                    t:add_proto_expert_info(P.c.ef_malformed, "not decoded: an earlier error on this direction is fatal")
                end
                consumed = tvb:len()
            else
                consumed = entry.stop
                if entry.stop < tvb:len() then
                    pinfo.desegment_offset = entry.stop
                    pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT
                    consumed = tvb:len()
                end
            end
            set_info(pinfo, P, infos)
        end)
        if not ok then
            tree:add_proto_expert_info(P.c.ef_bug, tostring(err))
            return tvb:len()
        end
        return consumed
    end

    return dissect, init
end

-- Heuristics over TCP. A connection's first message may come in segments too short to tell (a peer
-- writing a few bytes at a time, Nagle off): at the start of a direction, a heuristic that cannot tell
-- yet, but whose protocol those bytes could begin (P.prefix), asks TCP for one more segment instead of
-- giving up, and decides once the bytes are put together (TCP hands the reassembled bytes to the
-- heuristics again: another protocol's may claim them then). Only in the first pass: the second one
-- follows the reassembly the first made.
local heur_dirs = {}   -- "src:port>dst:port" -> {first = frame, start = frame, more = frame}

-- Whether the bytes a heuristic sees in this frame start the direction: the direction's first data,
-- or what TCP put together after a heuristic asked for more there.
local function heur_at_start(pinfo)
    local key = tostring(pinfo.src) .. ":" .. pinfo.src_port .. ">" .. tostring(pinfo.dst) .. ":" .. pinfo.dst_port
    local h = heur_dirs[key]
    if not h then
        h = {first = pinfo.number}
        heur_dirs[key] = h
    end
    if h.first == pinfo.number or h.start == pinfo.number then return h, true end
    if h.more and pinfo.number > h.more then
        h.start, h.more = pinfo.number, nil
        return h, true
    end
    return h, false
end

-- Registers a protocol: its recording link type, and for TCP its port and heuristic.
local protocols = {}

local function register(P)
    local rec_dissect, rec_init, rec_marker = make_recording_dissector(P)
    P.marker = rec_marker
    local tcp_dissect, tcp_init
    if P.tcp then tcp_dissect, tcp_init = make_tcp_dissector(P) end
    P.proto.init = function()
        rec_init()
        if tcp_init then tcp_init() end
        heur_dirs = {}
    end
    local is_tcp_dissection = false
    P.proto.dissector = function(tvb, pinfo, tree)
        -- Over TCP, pinfo has ports; a recording's records have none.
        if tcp_dissect and (pinfo.src_port ~= 0 or pinfo.dst_port ~= 0) then
            return tcp_dissect(tvb, pinfo, tree)
        end
        return rec_dissect(tvb, pinfo, tree)
    end
    DissectorTable.get("wtap_encap"):add(P.encap, P.proto)
    if P.tcp then
        if P.port then DissectorTable.get("tcp.port"):add(P.port, P.proto) end
        if P.heuristic then
            P.proto:register_heuristic("tcp", function(tvb, pinfo, tree)
                local s = tvb:raw(0, math.min(tvb:len(), 64))
                local ok, yes = pcall(P.heuristic, s)
                if ok and yes then
                    pinfo.conversation = P.proto
                    P.proto.dissector(tvb, pinfo, tree)
                    return true
                end
                if P.prefix and not pinfo.visited then
                    local h, start = heur_at_start(pinfo)
                    local ok2, could = pcall(P.prefix, s)
                    if start and ok2 and could then
                        h.more = pinfo.number
                        pinfo.desegment_offset = 0
                        pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT
                        return true
                    end
                end
                return false
            end)
        end
    end
    table.insert(protocols, P)
end

---------------------------------------------------------------------------------------------------
-- meter161: System/161's meter socket, text lines (../shared/specs/meter161-notes.md).
---------------------------------------------------------------------------------------------------

do
    local p = Proto("meter161", "System/161 meter protocol")
    local c = common_fields(p, "meter161")
    local F = {
        kind = ProtoField.string("meter161.kind", "Line kind"),
        line = ProtoField.string("meter161.line", "Line"),
        version = ProtoField.uint32("meter161.version", "HELLO version"),
        head = ProtoField.string("meter161.head", "HEAD name"),
        width = ProtoField.uint32("meter161.width", "WIDTH"),
        interval = ProtoField.uint64("meter161.interval", "INTERVAL (ns)"),
        interval_text = ProtoField.string("meter161.interval_text", "INTERVAL argument"),
        bad = ProtoField.string("meter161.bad", "BAD text"),
        error = ProtoField.string("meter161.error", "ERROR text"),
        counter = ProtoField.string("meter161.counter", "Counter"),
        value = ProtoField.uint64("meter161.value", "Value"),
    }
    -- One field per counter sys161 sends (and the version 1 names); other HEAD names use
    -- meter161.counter / meter161.value.
    local counter_names = {"nsec", "kinsns", "uinsns", "udud", "idle", "irqs", "exns", "disk", "con",
        "emu", "net", "kern", "user"}
    local counter_fields = {}
    for _, name in ipairs(counter_names) do
        counter_fields[name] = ProtoField.uint64("meter161." .. name, name)
    end
    local list = {}
    for _, f in pairs(F) do table.insert(list, f) end
    for _, f in pairs(counter_fields) do table.insert(list, f) end
    for _, k in ipairs({"reassembled_in", "segment", "segment_count", "message_len", "incomplete", "undecoded"}) do
        table.insert(list, c[k])
    end
    p.fields = list
    p.experts = {c.ef_malformed, c.ef_truncated, c.ef_reassembled, c.ef_bug}

    local MAX_LINE = 4096
    local U64MAX = "18446744073709551615"

    -- A plain decimal u64 as UInt64, or nil.
    local function decimal_u64(w)
        if not w:match("^%d+$") then return nil end
        local t = w:gsub("^0+(%d)", "%1")
        if #t > 20 or (#t == 20 and t > U64MAX) then return nil end
        local v = UInt64.new(0, 0)
        for i = 1, #t do
            v = v * 10 + (t:byte(i) - 48)
        end
        return v
    end

    -- Words and their offsets in a line (space, tab and CR separate).
    local function words(line)
        local out = {}
        local i = 1
        while true do
            local a, b = line:find("[^ \t\r]+", i)
            if not a then break end
            table.insert(out, {w = line:sub(a, b), o = a - 1, l = b - a + 1})
            i = b + 1
        end
        return out
    end

    local function parse(s, pos, d, cs, dir)
        local nl = s:find("\n", pos, true)
        if d.skipping then
            -- The rest of an over-long line, up to its LF.
            if not nl then return #s - pos + 1, {items = {}, info = "(rest of an over-long line)", err = "line longer than " .. MAX_LINE .. " bytes"} end
            d.skipping = false
            return nl - pos + 1, {items = {}, info = "(end of an over-long line)", err = "line longer than " .. MAX_LINE .. " bytes"}
        end
        if not nl then
            if #s - pos + 1 > MAX_LINE then
                d.skipping = true
                return #s - pos + 1, {items = {}, info = "(over-long line)", err = "line longer than " .. MAX_LINE .. " bytes"}
            end
            return nil
        end
        local len = nl - pos + 1
        local line = s:sub(pos, nl - 1)
        local msg = {items = {}}
        local items = msg.items
        if len > MAX_LINE then
            msg.err = "line longer than " .. MAX_LINE .. " bytes"
            msg.info = "(over-long line)"
            return len, msg
        end
        local ws = words(line)
        table.insert(items, {f = F.line, o = 0, l = #line, v = line:gsub("\r$", "")})
        if #ws == 0 then
            table.insert(items, {f = F.kind, v = "BLANK", generated = true})
            msg.info = "(blank line)"
            return len, msg
        end
        local kw = ws[1].w:upper()
        local kind = kw
        local known = {HELLO = 1, HEAD = 1, WIDTH = 1, DATA = 1, INTERVAL = 1, BAD = 1, OK = 1, ERROR = 1}
        if not known[kw] then kind = "UNKNOWN" end
        table.insert(items, {f = F.kind, o = ws[1].o, l = ws[1].l, v = kind})
        msg.title = "System/161 meter: " .. kind
        local rest_o = ws[2] and ws[2].o or #line
        local rest = line:sub(rest_o + 1):gsub("[ \t\r]+$", "")
        if kind == "HELLO" then
            local v = ws[2] and ws[2].w:match("^%d+$") and tonumber(ws[2].w)
            if #ws ~= 2 or not v then
                msg.err = "HELLO needs one number"
            else
                table.insert(items, {f = F.version, o = ws[2].o, l = ws[2].l, v = v})
                if v ~= 2 then msg.err = "unsupported protocol version " .. v end
            end
            msg.info = "HELLO " .. (ws[2] and ws[2].w or "")
        elseif kind == "HEAD" then
            local names = {}
            for i = 2, #ws do
                table.insert(names, ws[i].w)
                table.insert(items, {f = F.head, o = ws[i].o, l = ws[i].l, v = ws[i].w})
            end
            cs.head = names
            msg.info = "HEAD " .. table.concat(names, " ")
        elseif kind == "WIDTH" then
            for i = 2, #ws do
                local v = ws[i].w:match("^%d+$") and tonumber(ws[i].w)
                if v and v < 4294967296 then
                    table.insert(items, {f = F.width, o = ws[i].o, l = ws[i].l, v = v})
                else
                    msg.err = "WIDTH value " .. ws[i].w .. " is not a number"
                end
            end
            msg.info = "WIDTH"
        elseif kind == "DATA" then
            local head = cs.head
            local n = #ws - 1
            msg.info = "DATA"
            if not head then
                msg.err = "DATA before HEAD"
            elseif n ~= #head then
                msg.err = "DATA has " .. n .. " values, HEAD names " .. #head
            end
            for i = 2, #ws do
                local v = decimal_u64(ws[i].w)
                local name = head and head[i - 1]
                if not v then
                    msg.err = msg.err or ("value " .. ws[i].w .. " is not a decimal u64")
                    table.insert(items, {label = (name or "?") .. ": " .. ws[i].w .. " (not a number)", o = ws[i].o, l = ws[i].l})
                elseif name and counter_fields[name] and not msg.err then
                    table.insert(items, {f = counter_fields[name], o = ws[i].o, l = ws[i].l, v = v})
                elseif name and not msg.err then
                    table.insert(items, {f = F.counter, o = ws[i].o, l = ws[i].l, v = name,
                        kids = {{f = F.value, o = ws[i].o, l = ws[i].l, v = v}}})
                else
                    table.insert(items, {f = F.value, o = ws[i].o, l = ws[i].l, v = v})
                end
            end
            if head and head[1] and ws[2] then msg.info = "DATA " .. head[1] .. "=" .. ws[2].w end
        elseif kind == "INTERVAL" then
            msg.info = "INTERVAL " .. rest
            if #ws ~= 2 then
                msg.err = "INTERVAL needs one number"
            else
                table.insert(items, {f = F.interval_text, o = ws[2].o, l = ws[2].l, v = ws[2].w})
                local v = decimal_u64(ws[2].w)
                if v then
                    table.insert(items, {f = F.interval, o = ws[2].o, l = ws[2].l, v = v})
                end
            end
        elseif kind == "BAD" then
            table.insert(items, {f = F.bad, o = rest_o, l = #rest, v = rest})
            msg.info = "BAD " .. rest
        elseif kind == "ERROR" then
            table.insert(items, {f = F.error, o = rest_o, l = #rest, v = rest})
            msg.info = "ERROR " .. rest
        elseif kind == "OK" then
            msg.info = "OK"
        else
            msg.info = "unknown line: " .. preview(line, 40)
            if dir == 1 then msg.err = "unknown line type " .. preview(ws[1].w, 20) end
        end
        return len, msg
    end

    register({proto = p, abbr = "meter161", colname = "meter161", c = c, parse = parse,
        encap = wtap_encaps.USER0, tcp = false})
end

---------------------------------------------------------------------------------------------------
-- A small JSON reader (for HMON's message name and UID): a table for objects and arrays, bounded depth.
---------------------------------------------------------------------------------------------------

local json_decode
local json_null = {}
do
    local MAX_DEPTH = 128
    local escapes = {['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t'}
    local function skip(s, i)
        local _, e = s:find("^[ \t\r\n]*", i)
        return e + 1
    end
    local value
    local function str(s, i)
        -- s:sub(i, i) == '"'
        local out = {}
        i = i + 1
        while true do
            local a = s:find('["\\%c]', i)
            if not a then error("unterminated string") end
            local ch = s:sub(a, a)
            table.insert(out, s:sub(i, a - 1))
            if ch == '"' then return table.concat(out), a + 1 end
            if ch ~= "\\" then error("control character in string") end
            local e = s:sub(a + 1, a + 1)
            if escapes[e] then
                table.insert(out, escapes[e])
                i = a + 2
            elseif e == "u" then
                local h = s:sub(a + 2, a + 5)
                if not h:match("^%x%x%x%x$") then error("bad \\u escape") end
                table.insert(out, "?")
                i = a + 6
            else
                error("bad escape")
            end
        end
    end
    function value(s, i, depth)
        if depth > MAX_DEPTH then error("nested too deeply") end
        i = skip(s, i)
        local ch = s:sub(i, i)
        if ch == "{" then
            local obj = {}
            i = skip(s, i + 1)
            if s:sub(i, i) == "}" then return obj, i + 1 end
            while true do
                i = skip(s, i)
                if s:sub(i, i) ~= '"' then error("object key expected") end
                local k
                k, i = str(s, i)
                i = skip(s, i)
                if s:sub(i, i) ~= ":" then error("':' expected") end
                local v
                v, i = value(s, i + 1, depth + 1)
                obj[k] = v
                i = skip(s, i)
                local sep = s:sub(i, i)
                if sep == "}" then return obj, i + 1 end
                if sep ~= "," then error("',' or '}' expected") end
                i = i + 1
            end
        elseif ch == "[" then
            local arr = {n = 0, array = true}
            i = skip(s, i + 1)
            if s:sub(i, i) == "]" then return arr, i + 1 end
            while true do
                local v
                v, i = value(s, i, depth + 1)
                arr.n = arr.n + 1
                arr[arr.n] = v
                i = skip(s, i)
                local sep = s:sub(i, i)
                if sep == "]" then return arr, i + 1 end
                if sep ~= "," then error("',' or ']' expected") end
                i = i + 1
            end
        elseif ch == '"' then
            return str(s, i)
        else
            local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
            if num and #num > 0 and num:match("^-?0%d") == nil and num:match("%d$") then
                return tonumber(num) or 0, i + #num
            end
            for lit, v in pairs({["true"] = true, ["false"] = false, ["null"] = json_null}) do
                if s:sub(i, i + #lit - 1) == lit then return v, i + #lit end
            end
            error("unexpected " .. (ch == "" and "end of text" or ("'" .. ch .. "'")))
        end
    end
    json_decode = function(s)
        local ok, v, i = pcall(value, s, 1, 0)
        if not ok then return nil, tostring(v):gsub("^.-:%d+: ", "") end
        i = skip(s, i)
        if i <= #s then return nil, "trailing characters" end
        return v
    end
end

---------------------------------------------------------------------------------------------------
-- hmon: Dyalog's Health Monitor (../shared/specs/hmon-notes.md): u32be total length, "HMON", payload.
---------------------------------------------------------------------------------------------------

do
    local p = Proto("hmon", "Dyalog APL Health Monitor (HMON)")
    local c = common_fields(p, "hmon")
    local F = {
        length = ProtoField.uint32("hmon.length", "Total length"),
        magic = ProtoField.string("hmon.magic", "Magic"),
        handshake = ProtoField.string("hmon.handshake", "Handshake"),
        command = ProtoField.string("hmon.command", "Command or response"),
        uid = ProtoField.string("hmon.uid", "UID"),
        payload = ProtoField.string("hmon.payload", "Payload"),
        kind = ProtoField.string("hmon.kind", "Payload kind"),
    }
    local list = {}
    for _, f in pairs(F) do table.insert(list, f) end
    for _, k in ipairs({"reassembled_in", "segment", "segment_count", "message_len", "incomplete", "undecoded"}) do
        table.insert(list, c[k])
    end
    p.fields = list
    p.experts = {c.ef_malformed, c.ef_truncated, c.ef_reassembled, c.ef_bug}

    local MAX_FRAME = 16 * 1024 * 1024

    local function parse(s, pos, d, cs, dir)
        local avail = #s - pos + 1
        if avail < 4 then return nil end
        local total = u32be(s, pos)
        local msg = {items = {}}
        local items = msg.items
        if total < 8 then
            table.insert(items, {f = F.length, o = 0, l = 4, v = total})
            msg.err, msg.fatal, msg.info = "total length " .. total .. " is below 8", true, "bad frame length"
            return 4, msg
        end
        if total == 8 then
            table.insert(items, {f = F.length, o = 0, l = 4, v = total})
            msg.err, msg.fatal, msg.info = "empty payload (total length 8)", true, "bad frame length"
            return 4, msg
        end
        if total > MAX_FRAME then
            table.insert(items, {f = F.length, o = 0, l = 4, v = total})
            msg.err, msg.fatal, msg.info = "total length " .. total .. " above the limit " .. MAX_FRAME, true, "frame too long"
            return 4, msg
        end
        if avail >= 8 and s:sub(pos + 4, pos + 7) ~= "HMON" then
            table.insert(items, {f = F.length, o = 0, l = 4, v = total})
            table.insert(items, {f = F.magic, o = 4, l = 4, v = preview(s:sub(pos + 4, pos + 7), 4)})
            msg.err, msg.fatal, msg.info = "bad magic (not HMON)", true, "bad magic"
            return 8, msg
        end
        if avail < total then return nil end
        table.insert(items, {f = F.length, o = 0, l = 4, v = total})
        table.insert(items, {f = F.magic, o = 4, l = 4, v = "HMON"})
        local payload = s:sub(pos + 8, pos + total - 1)
        local plen = total - 8
        if payload:sub(1, 19) == "SupportedProtocols=" or payload:sub(1, 14) == "UsingProtocol=" then
            table.insert(items, {f = F.kind, v = "handshake", generated = true})
            table.insert(items, {f = F.handshake, o = 8, l = plen, v = payload})
            msg.info = payload
            msg.title = "HMON handshake: " .. preview(payload, 40)
            local rest = payload:match("^SupportedProtocols=(.*)$")
            if rest then
                for item in (rest .. ","):gmatch("([^,]*),") do
                    if not item:match("^%s*%d+%s*$") then msg.err = "bad SupportedProtocols list" end
                end
            else
                local n = payload:match("^UsingProtocol=(.*)$")
                if not n:match("^%s*%d+%s*$") then msg.err = "bad UsingProtocol value" end
            end
            return total, msg
        end
        table.insert(items, {f = F.kind, v = "json", generated = true})
        table.insert(items, {f = F.payload, o = 8, l = plen, v = payload})
        local v, why = json_decode(payload)
        if v == nil then
            msg.err = "payload is not JSON (" .. why .. ")"
            msg.info = "invalid JSON: " .. preview(payload, 40)
            return total, msg
        end
        if type(v) ~= "table" or not v.array or v.n ~= 2 or type(v[1]) ~= "string" or type(v[2]) ~= "table" or v[2].array then
            msg.err = "not a [name, {arguments}] pair"
            msg.info = "invalid message: " .. preview(payload, 40)
            table.insert(items, {json = true, o = 8, l = plen})
            return total, msg
        end
        local name = v[1]
        table.insert(items, {f = F.command, o = 8, l = plen, v = name})
        local uid = v[2].UID
        if type(uid) == "string" then
            table.insert(items, {f = F.uid, o = 8, l = plen, v = uid})
        end
        table.insert(items, {json = true, o = 8, l = plen})
        msg.info = name .. (type(uid) == "string" and (" UID " .. uid) or "")
        msg.title = "HMON: " .. name
        return total, msg
    end

    local function heuristic(s)
        return #s >= 8 and s:sub(5, 8) == "HMON" and u32be(s, 1) > 8
    end

    -- Fewer than 8 bytes that could begin a frame: a length up to the limit (16 MiB), then "HMON".
    local function prefix(s)
        if #s == 0 or #s >= 8 or s:byte(1) > 1 then return false end
        if #s >= 4 and (u32be(s, 1) <= 8 or u32be(s, 1) > MAX_FRAME) then return false end
        return #s <= 4 or s:sub(5) == ("HMON"):sub(1, #s - 4)
    end

    register({proto = p, abbr = "hmon", colname = "HMON", c = c, parse = parse,
        encap = wtap_encaps.USER1, tcp = true, port = 4512, heuristic = heuristic, prefix = prefix})
end

---------------------------------------------------------------------------------------------------
-- mono_counters: the Mono counters agent/inspector protocol (../shared/specs/mono-counters-notes.md).
-- Direction 1 is the agent (the peer in a recording), 0 the inspector.
---------------------------------------------------------------------------------------------------

do
    local p = Proto("mono_counters", "Mono counters agent protocol")
    local c = common_fields(p, "mono_counters")
    local categories = {[0] = "Mono JIT", "Mono GC", "Mono Metadata", "Mono Generics", "Mono Security",
        "Mono Thread", "Mono ThreadPool", "Mono System", "Custom"}
    local types = {[0] = "INT", "LONG", "WORD", "DOUBLE"}
    local units = {[0] = "NONE", "BYTES", "TIME", "EVENTS", "CONFIG", "PERCENTAGE"}
    local variances = {[1] = "CONSTANT", [2] = "MONOTONIC", [3] = "VARIABLE"}
    local statuses = {[0] = "OK", "NOK", "NOTFOUND", "EXISTING"}
    local F = {
        command = ProtoField.string("mono_counters.command", "Command or response"),
        opcode = ProtoField.uint8("mono_counters.opcode", "Opcode"),
        version = ProtoField.int16("mono_counters.version", "Version"),
        count = ProtoField.int16("mono_counters.count", "Headers"),
        header = ProtoField.string("mono_counters.counter", "Counter"),
        category = ProtoField.int32("mono_counters.category", "Category", base.DEC, categories),
        name = ProtoField.string("mono_counters.name", "Name"),
        ctype = ProtoField.int32("mono_counters.type", "Type", base.DEC, types),
        unit = ProtoField.int32("mono_counters.unit", "Unit", base.DEC, units),
        variance = ProtoField.int32("mono_counters.variance", "Variance", base.DEC, variances),
        index = ProtoField.int16("mono_counters.index", "Index"),
        status = ProtoField.uint8("mono_counters.status", "Status", base.DEC, statuses),
        list_category = ProtoField.string("mono_counters.list.category", "Category"),
        list_name = ProtoField.string("mono_counters.list.name", "Name"),
        timestamp = ProtoField.int64("mono_counters.timestamp", "Timestamp (100 ns ticks)"),
        value = ProtoField.string("mono_counters.value", "Value"),
        value_index = ProtoField.int16("mono_counters.value.index", "Index"),
        value_size = ProtoField.int16("mono_counters.value.size", "Size"),
        value_counter = ProtoField.string("mono_counters.value.counter", "Counter"),
        value_int = ProtoField.int64("mono_counters.value.int", "Integer value"),
        value_double = ProtoField.double("mono_counters.value.double", "Double value"),
        value_raw = ProtoField.bytes("mono_counters.value.raw", "Raw value"),
        value_sample = ProtoField.int64("mono_counters.value.sample", "Sample timestamp"),
        string_len = ProtoField.int32("mono_counters.string_length", "String length"),
    }
    local list = {}
    for _, f in pairs(F) do table.insert(list, f) end
    for _, k in ipairs({"reassembled_in", "segment", "segment_count", "message_len", "incomplete", "undecoded"}) do
        table.insert(list, c[k])
    end
    p.fields = list
    p.experts = {c.ef_malformed, c.ef_truncated, c.ef_reassembled, c.ef_bug}

    local MAX_STRING, MAX_HEADERS, MAX_VALUES, MAX_LIST, MAX_MESSAGE = 1024, 4096, 4096, 16384, 1048576

    -- A cursor over s from pos: reads raise "more" (incomplete) or {bad = text}.
    local MORE = {}
    local function cursor(s, pos)
        local cur = {s = s, p = pos, base = pos}
        function cur.need(n)
            if cur.p + n - 1 > #s then error(MORE) end
            if cur.p + n - cur.base > MAX_MESSAGE then error({bad = "message longer than " .. MAX_MESSAGE .. " bytes"}) end
        end
        function cur.u8() cur.need(1); local v = s:byte(cur.p); cur.p = cur.p + 1; return v end
        function cur.i16() cur.need(2); local v = i16le(s, cur.p); cur.p = cur.p + 2; return v end
        function cur.i32() cur.need(4); local v = i32le(s, cur.p); cur.p = cur.p + 4; return v end
        function cur.off() return cur.p - cur.base end
        -- A string: returns the text (nil for null) and its offset and length (length field included).
        function cur.str(what, required)
            local o = cur.off()
            local n = cur.i32()
            if n == -1 then
                if required then error({bad = what .. " is null"}) end
                return nil, o, 4
            end
            if n < 0 then error({bad = what .. ": string length " .. n}) end
            if n > MAX_STRING then error({bad = what .. ": string of " .. n .. " bytes, above " .. MAX_STRING}) end
            cur.need(n)
            local t = s:sub(cur.p, cur.p + n - 1)
            cur.p = cur.p + n
            return t, o, 4 + n
        end
        return cur
    end

    local function full_name(cat, name)
        if cat == 8 then
            local a, b = name:match("^(.-):(.*)$")
            if a then return a .. "/" .. b end
            return "Custom/" .. name
        end
        return (categories[cat] or ("Category(" .. cat .. ")")) .. "/" .. name
    end

    local function header(cur)
        local o = cur.off()
        local cat = cur.i32()
        local name, no, nl = cur.str("counter name", true)
        local ty = cur.i32()
        local unit = cur.i32()
        local var = cur.i32()
        local index = cur.i16()
        local full = full_name(cat, name)
        local h = {cat = cat, name = name, type = ty, full = full, index = index}
        local item = {f = F.header, o = o, l = cur.off() - o, v = full, kids = {
            {f = F.category, o = o, l = 4, le = true},
            {f = F.string_len, o = no, l = 4, le = true},
            {f = F.name, o = no + 4, l = nl - 4, v = name},
            {f = F.ctype, o = no + nl, l = 4, le = true},
            {f = F.unit, o = no + nl + 4, l = 4, le = true},
            {f = F.variance, o = no + nl + 8, l = 4, le = true},
            {f = F.index, o = no + nl + 12, l = 2, le = true},
        }}
        return h, item
    end

    local function value_size_ok(ty, size)
        if ty == 0 then return size == 4 end
        if ty == 1 or ty == 3 then return size == 8 end
        if ty == 2 then return size == 4 or size == 8 end
        return size >= 0
    end

    -- Agent -> inspector.
    local function parse_agent(cur, cs, msg)
        local items = msg.items
        local op = cur.u8()
        table.insert(items, {f = F.opcode, o = 0, l = 1, v = op})
        local apply
        if op == 0 then
            msg.name = "Hello"
            local version = cur.i16()
            table.insert(items, {f = F.version, o = 1, l = 2, le = true})
            if version ~= 1 then error({bad = "unsupported version " .. version}) end
            local count = cur.i16()
            table.insert(items, {f = F.count, o = 3, l = 2, le = true})
            if count < 0 then error({bad = "negative header count " .. count}) end
            if count > MAX_HEADERS then error({bad = "too many headers: " .. count}) end
            local hs = {}
            for _ = 1, count do
                local h, item = header(cur)
                table.insert(hs, h)
                table.insert(items, item)
            end
            apply = function()
                cs.counters = {}
                for _, h in ipairs(hs) do cs.counters[h.index] = h end
            end
            msg.info = "Hello, " .. count .. " counters"
        elseif op == 1 then
            msg.name = "List response"
            local n = 0
            while true do
                local cat, o, l = cur.str("list category", false)
                if cat == nil then break end
                if n == MAX_LIST then error({bad = "too many list entries"}) end
                local name, o2, l2 = cur.str("list name", true)
                n = n + 1
                table.insert(items, {f = F.header, o = o, l = l + l2, v = cat .. "/" .. name, kids = {
                    {f = F.list_category, o = o + 4, l = l - 4, v = cat},
                    {f = F.list_name, o = o2 + 4, l = l2 - 4, v = name}}})
            end
            msg.info = "List response, " .. n .. " counters"
        elseif op == 2 then
            msg.name = "Add response"
            local st = cur.u8()
            table.insert(items, {f = F.status, o = 1, l = 1, v = st})
            if st == 0 then
                local h, item = header(cur)
                table.insert(items, item)
                apply = function()
                    cs.counters = cs.counters or {}
                    cs.counters[h.index] = h
                end
                msg.info = "Add response OK: " .. h.full .. " as index " .. h.index
            elseif statuses[st] then
                msg.info = "Add response " .. statuses[st]
            else
                error({bad = "unknown add status " .. st})
            end
        elseif op == 3 then
            msg.name = "Remove response"
            local st = cur.u8()
            table.insert(items, {f = F.status, o = 1, l = 1, v = st})
            if not statuses[st] then error({bad = "unknown remove status " .. st}) end
            msg.info = "Remove response " .. statuses[st]
        elseif op == 4 then
            msg.name = "Sampling"
            cur.need(8)
            local ts = Int64.new(u32le(cur.s, cur.p), u32le(cur.s, cur.p + 4))
            cur.p = cur.p + 8
            table.insert(items, {f = F.timestamp, o = 1, l = 8, le = true})
            local n = 0
            local names = {}
            while true do
                local o = cur.off()
                local index = cur.i16()
                if index == -1 then break end
                n = n + 1
                if n > MAX_VALUES then error({bad = "too many values"}) end
                local size = cur.i16()
                local h = cs.counters and cs.counters[index]
                if not h then error({bad = "value for unknown index " .. index}) end
                if size < 0 or not value_size_ok(h.type, size) then
                    error({bad = "value of " .. size .. " bytes for a " .. (types[h.type] or ("type " .. h.type)) .. " counter"})
                end
                cur.need(size)
                local vo = cur.off()
                cur.p = cur.p + size
                local kids = {
                    {f = F.value_index, o = o, l = 2, le = true},
                    {f = F.value_size, o = o + 2, l = 2, le = true},
                    {f = F.value_counter, o = o, l = 2, v = h.full},
                    {f = F.value_sample, v = ts, generated = true},
                }
                if h.type == 3 then
                    table.insert(kids, {f = F.value_double, o = vo, l = 8, le = true})
                elseif (h.type == 0 or h.type == 2) and size == 4 then
                    table.insert(kids, {f = F.value_int, o = vo, l = 4, v = Int64.new(i32le(cur.s, cur.base + vo))})
                elseif h.type == 1 or h.type == 2 then
                    table.insert(kids, {f = F.value_int, o = vo, l = 8, le = true})
                end
                if size > 0 then table.insert(kids, {f = F.value_raw, o = vo, l = size}) end
                table.insert(items, {f = F.value, o = o, l = 4 + size, v = h.full, kids = kids})
                table.insert(names, h.name)
            end
            msg.info = "Sampling, " .. n .. " values"
        else
            error({bad = "unknown agent opcode " .. op, fatal = true})
        end
        return apply
    end

    -- Inspector -> agent (the agent's own opcodes: List 0, Add 1, Remove 2, Good Bye 127).
    local function parse_inspector(cur, cs, msg)
        local items = msg.items
        local op = cur.u8()
        table.insert(items, {f = F.opcode, o = 0, l = 1, v = op})
        if op == 0 then
            msg.name, msg.info = "List", "List"
        elseif op == 1 then
            msg.name = "Add"
            local cat, o, l = cur.str("category", true)
            local name, o2, l2 = cur.str("name", true)
            table.insert(items, {f = F.list_category, o = o + 4, l = l - 4, v = cat})
            table.insert(items, {f = F.list_name, o = o2 + 4, l = l2 - 4, v = name})
            msg.info = "Add " .. cat .. "/" .. name
        elseif op == 2 then
            msg.name = "Remove"
            local index = cur.i16()
            table.insert(items, {f = F.index, o = 1, l = 2, le = true})
            msg.info = "Remove " .. (index < 0 and "all" or ("index " .. index))
        elseif op == 127 then
            msg.name, msg.info = "Good Bye", "Good Bye"
        else
            -- The real agent ignores an unknown command byte and consumes nothing after it.
            msg.name = "Unknown command"
            msg.info = "unknown command " .. op .. " (ignored by the agent)"
            msg.err = "unknown inspector command " .. op
        end
    end

    local function parse(s, pos, d, cs, dir)
        local cur = cursor(s, pos)
        local msg = {items = {}}
        local ok, r = pcall(function()
            if dir == 1 then return parse_agent(cur, cs, msg) else return parse_inspector(cur, cs, msg) end
        end)
        if not ok then
            if r == MORE then return nil end
            if type(r) == "table" and r.bad then
                msg.err = r.bad
                msg.fatal = true
                msg.info = (msg.name or "message") .. ": " .. r.bad
                if msg.name then table.insert(msg.items, 1, {f = F.command, o = 0, l = 1, v = msg.name}) end
                return #s - pos + 1, msg
            end
            error(r, 0)
        end
        if r then r() end
        table.insert(msg.items, 1, {f = F.command, o = 0, l = 1, v = msg.name})
        msg.title = "Mono counters: " .. msg.name
        return cur.p - pos, msg
    end

    -- Which side is the agent over TCP: the one that sent the Hello, else the one that dials port 8888.
    local function tcp_dir(conv, pinfo, s)
        local src = tostring(pinfo.src) .. ":" .. pinfo.src_port
        if not conv.agent then
            if #s >= 5 and s:byte(1) == 0 and s:byte(2) == 1 and s:byte(3) == 0 then
                conv.agent = src
            elseif pinfo.dst_port == 8888 then
                conv.agent = src
            else
                conv.agent = tostring(pinfo.dst) .. ":" .. pinfo.dst_port
            end
        end
        return src == conv.agent and 1 or 0
    end

    local function heuristic(s)
        -- A Hello: opcode 0, version 1, a header count >= 0 and a first header with a known category.
        if #s < 5 or s:byte(1) ~= 0 or s:byte(2) ~= 1 or s:byte(3) ~= 0 then return false end
        local count = i16le(s, 4)
        if count < 0 or count > MAX_HEADERS then return false end
        if count == 0 then return #s == 5 end
        if #s < 13 then return false end
        local cat, n = i32le(s, 6), i32le(s, 10)
        return cat >= 0 and cat <= 8 and n >= 0 and n <= MAX_STRING
    end

    -- Fewer than 13 bytes that could begin a Hello with counters: opcode 0, version 1, a header count
    -- and a category (a little-endian i32 from 0 to 8).
    local function prefix(s)
        if #s == 0 or #s >= 13 then return false end
        local want = {0, 1, 0}
        for i = 1, math.min(#s, 3) do
            if s:byte(i) ~= want[i] then return false end
        end
        if #s >= 5 then
            local count = i16le(s, 4)
            if count <= 0 or count > MAX_HEADERS then return false end
        end
        if #s >= 6 and s:byte(6) > 8 then return false end
        for i = 7, math.min(#s, 9) do
            if s:byte(i) ~= 0 then return false end
        end
        return true
    end

    register({proto = p, abbr = "mono_counters", colname = "Mono", c = c, parse = parse,
        encap = wtap_encaps.USER2, tcp = true, port = 8888, heuristic = heuristic, prefix = prefix,
        tcp_dir = tcp_dir})
end

---------------------------------------------------------------------------------------------------
-- smon: Tino's mon stream (../shared/specs/smon-notes.md, resolutions A1-A13).
---------------------------------------------------------------------------------------------------

do
    local p = Proto("smon", "smon monitor stream")
    local c = common_fields(p, "smon")
    local F = {
        item = ProtoField.string("smon.item", "Item"),
        token = ProtoField.string("smon.token", "Token"),
        token_delta = ProtoField.string("smon.token_field", "Token field"),
        name = ProtoField.string("smon.name", "Name"),
        ttype = ProtoField.string("smon.type", "Type"),
        new_token = ProtoField.string("smon.new_token", "New token"),
        bound = ProtoField.string("smon.bound_index", "Bound index"),
        index = ProtoField.string("smon.index", "Index"),
        index_op = ProtoField.string("smon.index_op", "Index op"),
        delta = ProtoField.string("smon.delta", "Value field"),
        value = ProtoField.uint64("smon.value", "Value"),
        text = ProtoField.string("smon.text", "Text value"),
        resync = ProtoField.bytes("smon.resync", "Resync sequence"),
        skipped = ProtoField.bytes("smon.skipped", "Skipped (out of sync)"),
        update = ProtoField.string("smon.update", "Update (name[index]=value)"),
    }
    local list = {}
    for _, f in pairs(F) do table.insert(list, f) end
    for _, k in ipairs({"reassembled_in", "segment", "segment_count", "message_len", "incomplete", "undecoded"}) do
        table.insert(list, c[k])
    end
    p.fields = list
    p.experts = {c.ef_malformed, c.ef_truncated, c.ef_reassembled, c.ef_bug}

    local MAX_STRING, MAX_TOKENS, MAX_DEPTH = 64 * 1024, 65536, 16
    local ZERO = UInt64.new(0, 0)

    local function new_conn()
        return {}
    end

    local function new_state(d)
        d.tokens = {}          -- tostring(number) -> {name, kind = "u"|"s", bound = UInt64|nil, last}
        d.ntokens = 0
        d.current = ZERO
        d.ix = {}
        d.ff_run = 0
        d.sync = "synced"
    end

    local MORE = {}
    local Bad = function(text, fatalish) error({bad = text}) end

    -- A cursor over s: the FF run is counted over the raw stream (A10).
    local function cursor(s, pos, ff_run)
        local cur = {p = pos, ff = ff_run}
        function cur.peek()
            if cur.p > #s then error(MORE) end
            return s:byte(cur.p)
        end
        function cur.bump()
            local b = cur.peek()
            cur.p = cur.p + 1
            if b == 255 then cur.ff = cur.ff + 1 else cur.ff = 0 end
            return b
        end
        -- A number field: kind ("pos", "neg", "abs"), magnitude (UInt64; "pos" may exceed u64: carry flag)
        function cur.number()
            local o = cur.p
            local prefix = cur.peek()
            if prefix <= 0xDF then
                cur.bump()
                return "pos", UInt64.new(prefix, 0), false, o
            elseif prefix <= 0xF7 then
                local len
                if prefix <= 0xE7 then len = prefix - 0xE0 + 1
                elseif prefix <= 0xEF then len = prefix - 0xE8 + 1
                else len = prefix - 0xF0 + 1 end
                if cur.p + len > #s then error(MORE) end
                cur.bump()
                local v = UInt64.new(0, 0)
                for _ = 1, len do v = v * 256 + cur.bump() end
                if prefix <= 0xE7 then
                    local sum = v + 0xE0
                    return "pos", sum, sum < v, o
                elseif prefix <= 0xEF then
                    return "neg", v, false, o
                end
                return "abs", v, false, o
            elseif prefix >= 0xFA and prefix <= 0xFD then
                Bad(string.format("index op %02X where a number is expected", prefix))
            elseif prefix == 0xFF then
                -- The start (or continuation) of a resync run, else an error.
                local run, q = cur.ff, cur.p
                while true do
                    if q > #s then error(MORE) end
                    if s:byte(q) ~= 255 then Bad("FF where a number is expected") end
                    run = run + 1
                    q = q + 1
                    if run >= 17 then error({resync = q}) end
                end
            else
                Bad(string.format("reserved prefix %02X", prefix))
            end
        end
        -- n bytes of string data, dropping the FE stuffed after 16 FFs.
        function cur.string_data(n)
            local out = {}
            local start = cur.p
            local got = 0
            while true do
                if cur.ff == 16 and cur.p > start then
                    local b = cur.peek()
                    if b == 0xFE then cur.bump()
                    elseif b == 0xFF then cur.bump(); error({resync = cur.p})
                    else Bad(string.format("missing stuffing FE after 16 FFs (found %02X)", b)) end
                end
                if got == n then return table.concat(out) end
                local b = cur.bump()
                out[#out + 1] = string.char(b)
                got = got + 1
            end
        end
        return cur
    end

    local function unsigned(prev, kind, v)
        if kind == "abs" then return v end
        if kind == "pos" then return prev + v end   -- modulo 2^64
        return prev - v                             -- modulo 2^64
    end

    local function index_text(ix)
        local t = {}
        for i, v in ipairs(ix) do t[i] = tostring(v) end
        return "[" .. table.concat(t, ",") .. "]"
    end

    local function parse_item(s, pos, d)
        local cur = cursor(s, pos, d.ff_run)
        local items = {}
        local msg = {items = items}
        local b = cur.peek()
        local function op(ix)
            local o = cur.p - pos
            local opb = cur.bump()
            if opb == 0xFD then
                for k in pairs(ix) do ix[k] = nil end
                return "FD reset", o
            end
            local kind, v, carry = cur.number()
            if kind == "neg" and v ~= ZERO then Bad("negative index") end
            if kind == "neg" then v = ZERO end
            local depth = #ix
            if opb == 0xFA then
                if depth >= MAX_DEPTH then Bad("index deeper than " .. MAX_DEPTH) end
                ix[depth + 1] = v
                return "FA add " .. tostring(v), o
            elseif opb == 0xFB then
                if depth < 1 then Bad("FB with no index level") end
                ix[depth] = v
                return "FB same " .. tostring(v), o
            else
                if depth < 2 then Bad("FC with fewer than two index levels") end
                ix[depth - 1] = v
                return "FC previous " .. tostring(v), o
            end
        end
        if b >= 0xFA and b <= 0xFD then
            local ix = {}
            for i, v in ipairs(d.ix) do ix[i] = v end
            local text, o = op(ix)
            table.insert(items, {f = F.index_op, o = o, l = cur.p - pos - o, v = text})
            table.insert(items, {f = F.index, v = index_text(ix), generated = true})
            msg.info = "index " .. text
            msg.item = "index"
            msg.apply = function() d.ix = ix end
            return cur, msg
        end
        local kind, v, carry, o = cur.number()
        local token = unsigned(d.current, kind, v)
        table.insert(items, {f = F.token_delta, o = o - pos, l = cur.p - o, v = kind .. " " .. tostring(v)})
        table.insert(items, {f = F.token, o = o - pos, l = cur.p - o, v = tostring(token)})
        local function indexed_ops()
            if cur.peek() ~= 0xFD then return nil end
            local fo = cur.p - pos
            cur.bump()
            if cur.peek() ~= 0xFA then Bad("indexed definition without an index") end
            local ix, first = {}, nil
            while true do
                local nb = cur.peek()
                if nb < 0xFA or nb > 0xFC then break end
                local text, oo = op(ix)
                table.insert(items, {f = F.index_op, o = oo, l = cur.p - pos - oo, v = text})
                first = first or ix[1]
            end
            return {first = first, ix = ix, o = fo}
        end
        local function new_token(from)
            local o2 = cur.p
            local k2, v2 = cur.number()
            local t = unsigned(from, k2, v2)
            if t == ZERO or d.tokens[tostring(t)] then Bad("token " .. tostring(t) .. " is already defined") end
            if d.ntokens >= MAX_TOKENS then Bad("more than " .. MAX_TOKENS .. " tokens") end
            table.insert(items, {f = F.new_token, o = o2 - pos, l = cur.p - o2, v = tostring(t)})
            return t
        end
        local function string_len(base_len)
            local k, n = cur.number()
            if k == "neg" then Bad("negative string length delta") end
            local len = tonumber(tostring(n))
            local total = (k == "pos") and (len + base_len) or len
            if total > MAX_STRING then Bad("string of " .. total .. " bytes, above " .. MAX_STRING) end
            return k == "pos", len
        end
        local function value(tkind, last)
            local vo = cur.p
            if tkind == "u" then
                local k, n = cur.number()
                local newv = unsigned(last or ZERO, k, n)
                table.insert(items, {f = F.delta, o = vo - pos, l = cur.p - vo, v = k .. " " .. tostring(n)})
                return newv
            end
            local base = last or ""
            local append, len = string_len(#base)
            local data = cur.string_data(len)
            local newv = append and (base .. data) or data
            table.insert(items, {f = F.delta, o = vo - pos, l = cur.p - vo, v = (append and "append " or "restart ") .. len})
            return newv
        end
        local def
        if token == ZERO then
            local indexed = indexed_ops()
            local so = cur.p
            local _, len = string_len(0)
            if len < 4 then Bad("definition string of " .. len .. " bytes (at least 4)") end
            local data = cur.string_data(len)
            local ty = data:sub(1, 1)
            if ty ~= "u" and ty ~= "s" then Bad("unknown type byte " .. string.format("%02X", data:byte(1))) end
            local name = data:sub(2)
            table.insert(items, {f = F.ttype, o = so - pos, l = cur.p - so, v = ty})
            table.insert(items, {f = F.name, o = so - pos, l = cur.p - so, v = name})
            local t = new_token(ZERO)
            local newv = value(ty, nil)
            def = {token = t, name = name, kind = ty, indexed = indexed, value = newv}
        else
            local tok = d.tokens[tostring(token)]
            if not tok then Bad("undefined token " .. tostring(token)) end
            local indexed = indexed_ops()
            if indexed then
                local t = new_token(token)
                local newv = value(tok.kind, nil)
                def = {token = t, name = tok.name, kind = tok.kind, indexed = indexed, value = newv}
            else
                local newv = value(tok.kind, tok.last)
                msg.item = "value"
                msg.apply = function()
                    tok.last = newv
                    d.current = token
                end
                msg.value = {token = token, tok = tok, v = newv}
                return cur, msg
            end
        end
        msg.item = "define"
        msg.apply = function()
            local bound = nil
            if def.indexed then
                bound = def.indexed.first
                d.ix = def.indexed.ix
            end
            local tok = {name = def.name, kind = def.kind, bound = bound, last = def.value}
            d.tokens[tostring(def.token)] = tok
            d.ntokens = d.ntokens + 1
            d.current = def.token
            msg.value = {token = def.token, tok = tok, v = def.value}
        end
        msg.define = def
        return cur, msg
    end

    -- The effective index of a value of tok (A13).
    local function effective(d, tok)
        if not tok.bound then return index_text(d.ix) end
        local ix = {tok.bound}
        for i = 2, #d.ix do ix[i] = d.ix[i] end
        return index_text(ix)
    end

    local function describe_value(d, msg)
        local val = msg.value
        local tok = val.tok
        local idx = effective(d, tok)
        table.insert(msg.items, {f = F.name, v = tok.name, generated = true})
        table.insert(msg.items, {f = F.index, v = idx, generated = true})
        if tok.kind == "u" then
            table.insert(msg.items, {f = F.value, v = val.v, generated = true})
            table.insert(msg.items, {f = F.update, v = tok.name .. idx .. "=" .. tostring(val.v), generated = true})
            msg.info = tok.name .. idx .. "=" .. tostring(val.v)
        else
            table.insert(msg.items, {f = F.text, v = val.v, generated = true})
            table.insert(msg.items, {f = F.update, v = tok.name .. idx .. "=" .. val.v, generated = true})
            msg.info = tok.name .. idx .. "=" .. preview(val.v, 40)
        end
    end

    local function parse(s, pos, d, cs, dir)
        if not d.tokens then new_state(d) end
        if d.sync == "resync" then
            -- After 17 FFs: more FFs are eaten, then FE completes the resync.
            local q = pos
            while q <= #s and s:byte(q) == 255 do q = q + 1 end
            if q > #s then
                if q == pos then return nil end
                return q - pos, {items = {{f = F.resync, o = 0, l = q - pos}}, info = "resync (FF)"}
            end
            local msg = {items = {}}
            if s:byte(q) == 0xFE then
                new_state(d)
                table.insert(msg.items, {f = F.resync, o = 0, l = q - pos + 1})
                table.insert(msg.items, {f = F.item, v = "resync", generated = true})
                msg.info = "resync"
                msg.title = "smon: resync"
                return q - pos + 1, msg
            end
            d.sync = "lost"
            d.ff_run = 0
            msg.err = string.format("broken resync: %02X after the FFs", s:byte(q))
            msg.info = "broken resync"
            table.insert(msg.items, {f = F.skipped, o = q - pos, l = 1})
            return q - pos + 1, msg
        end
        if d.sync == "lost" then
            -- Skip to the next 17 x FF FE.
            local run = d.ff_run
            for q = pos, #s do
                local b = s:byte(q)
                if b == 255 then
                    run = run + 1
                elseif b == 0xFE and run >= 17 then
                    new_state(d)
                    local msg = {items = {{f = F.skipped, o = 0, l = q - pos + 1}, {f = F.item, v = "resync", generated = true}},
                        info = "resync after skipping", title = "smon: resync"}
                    return q - pos + 1, msg
                else
                    run = 0
                end
            end
            d.ff_run = run
            return #s - pos + 1, {items = {{f = F.skipped, o = 0, l = #s - pos + 1}}, info = "skipped (out of sync)", title = "smon: out of sync"}
        end
        local ok, cur, msg = pcall(parse_item, s, pos, d)
        if not ok then
            local e = cur
            if e == MORE then return nil end
            if type(e) == "table" and e.resync then
                -- Up to the 17th FF: the item is dropped, the stream resyncs.
                d.sync = "resync"
                d.ff_run = 17
                return e.resync - pos, {items = {{f = F.resync, o = 0, l = e.resync - pos}}, info = "resync (17 FF)", title = "smon: resync"}
            end
            if type(e) == "table" and e.bad then
                d.sync = "lost"
                d.ff_run = 0
                d.ff_run = (s:byte(pos) == 255) and 1 or 0
                local m = {items = {{f = F.skipped, o = 0, l = 1}}, err = e.bad, info = "error: " .. e.bad, title = "smon: error"}
                return 1, m
            end
            error(e, 0)
        end
        d.ff_run = cur.ff
        msg.apply()
        table.insert(msg.items, 1, {f = F.item, o = 0, l = cur.p - pos, v = msg.item})
        if msg.item == "define" then
            local def = msg.define
            table.insert(msg.items, {f = F.new_token, v = tostring(def.token), generated = true})
            if def.indexed then
                table.insert(msg.items, {f = F.bound, v = tostring(def.indexed.first), generated = true})
            end
            describe_value(d, msg)
            msg.info = "define " .. def.name .. " (" .. def.kind .. ") as token " .. tostring(def.token) .. ": " .. msg.info
            msg.title = "smon: definition of token " .. tostring(def.token)
        elseif msg.item == "value" then
            describe_value(d, msg)
            msg.title = "smon: value"
        else
            msg.title = "smon: index"
        end
        return cur.p - pos, msg
    end

    local function heuristic(s)
        if #s < 18 then return false end
        for i = 1, 17 do if s:byte(i) ~= 255 then return false end end
        return s:byte(18) == 0xFE
    end

    -- The stream flows from the monitor (the TCP server) to the reader.
    local function tcp_dir(conv, pinfo, s)
        if not conv.server then
            if heuristic(s) or pinfo.src_port == 7399 then
                conv.server = tostring(pinfo.src) .. ":" .. pinfo.src_port
            else
                conv.server = tostring(pinfo.dst) .. ":" .. pinfo.dst_port
            end
        end
        return (tostring(pinfo.src) .. ":" .. pinfo.src_port == conv.server) and 1 or 0
    end

    -- Fewer than 18 bytes that could begin the resync: FFs.
    local function prefix(s)
        if #s == 0 or #s >= 18 then return false end
        for i = 1, #s do if s:byte(i) ~= 255 then return false end end
        return true
    end

    register({proto = p, abbr = "smon", colname = "smon", c = c, parse = parse, new_conn = new_conn,
        encap = wtap_encaps.USER3, tcp = true, port = 7399, heuristic = heuristic, prefix = prefix,
        tcp_dir = tcp_dir})
end

---------------------------------------------------------------------------------------------------
-- rvos_sysinfo: the rvOS sysinfo service over the host transport (../shared/specs/sysinfo-notes.md,
-- crates/sysinfo-wire/src/codec.rs). Direction 0 is the client (telemon), 1 the kernel side.
---------------------------------------------------------------------------------------------------

do
    local p = Proto("rvos_sysinfo", "rvOS sysinfo (host transport)")
    local c = common_fields(p, "rvos_sysinfo")
    local commands = {[0] = "Ps", "Memstat", "Trace", "TraceClear", "Kstat", "Channels", "SchedLatency",
        "IpcLatency", "Watchdog"}
    local kinds = {[1] = "MESSAGE", [2] = "CLOSE"}
    local F = {
        kind = ProtoField.uint8("rvos_sysinfo.kind", "Frame kind", base.DEC, kinds),
        channel = ProtoField.uint32("rvos_sysinfo.channel", "Channel"),
        sender_pid = ProtoField.uint64("rvos_sysinfo.sender_pid", "Sender pid"),
        cap_count = ProtoField.uint8("rvos_sysinfo.cap_count", "Caps"),
        cap = ProtoField.uint32("rvos_sysinfo.cap", "Cap (channel)"),
        len = ProtoField.uint16("rvos_sysinfo.len", "Data length"),
        data = ProtoField.bytes("rvos_sysinfo.data", "Data"),
        command = ProtoField.string("rvos_sysinfo.command", "Command"),
        command_tag = ProtoField.uint8("rvos_sysinfo.command_tag", "Command tag"),
        boot = ProtoField.string("rvos_sysinfo.boot", "Boot channel message"),
        service = ProtoField.string("rvos_sysinfo.service", "Service"),
        boot_error = ProtoField.string("rvos_sysinfo.boot_error", "Boot error"),
        chunk_len = ProtoField.uint16("rvos_sysinfo.chunk_len", "Chunk length"),
        sentinel = ProtoField.bool("rvos_sysinfo.sentinel", "End of reply (zero-length sentinel)"),
        reply_command = ProtoField.string("rvos_sysinfo.reply.command", "Reply to command"),
        reply_report = ProtoField.string("rvos_sysinfo.reply.report", "Report (telemon's name)"),
        reply_chunks = ProtoField.uint32("rvos_sysinfo.reply.chunks", "Reply chunks"),
        reply_chunk = ProtoField.uint32("rvos_sysinfo.reply.chunk_len", "Reply chunk length"),
        reply_end = ProtoField.string("rvos_sysinfo.reply.end", "Reply ended by"),
        report = ProtoField.string("rvos_sysinfo.report", "Report text"),
        report_bytes = ProtoField.bytes("rvos_sysinfo.report.bytes", "Report bytes"),
        reply_frames = ProtoField.string("rvos_sysinfo.reply.frames", "Reply chunk frames"),
    }
    local list = {}
    for _, f in pairs(F) do table.insert(list, f) end
    for _, k in ipairs({"reassembled_in", "segment", "segment_count", "message_len", "incomplete", "undecoded"}) do
        table.insert(list, c[k])
    end
    p.fields = list
    p.experts = {c.ef_malformed, c.ef_truncated, c.ef_reassembled, c.ef_bug}

    local MAX_RESPONSE = 4 * 1024 * 1024
    local report_names = {Ps = "ps", Memstat = "memstat", Trace = "trace", TraceClear = "trace-clear",
        Kstat = "kstat", Channels = "channels", SchedLatency = "schedlat", IpcLatency = "ipclat",
        Watchdog = "watchdog"}

    local function new_conn()
        return {asked = {}, replies = {}}
    end

    local function finish_reply(cs, channel, msg, how)
        local r = cs.replies[channel]
        cs.replies[channel] = nil
        local cmd = cs.asked[channel]
        cs.asked[channel] = nil
        local text = table.concat(r and r.chunks or {})
        local items = msg.items
        table.insert(items, {f = F.reply_command, v = cmd or "(unknown)", generated = true})
        table.insert(items, {f = F.reply_report, v = report_names[cmd or ""] or "(unknown)", generated = true})
        table.insert(items, {f = F.reply_end, v = how, generated = true})
        table.insert(items, {f = F.reply_chunks, v = r and #r.chunks or 0, generated = true})
        for _, ch in ipairs(r and r.chunks or {}) do
            table.insert(items, {f = F.reply_chunk, v = #ch, generated = true})
        end
        if r and r.pending and #r.pending > 0 then
            table.insert(items, {f = F.reply_frames, lazy = r.pending, generated = true})
        end
        if #text > 0 then
            table.insert(items, {f = F.report, tvbtext = text, tvbname = "Report text (" .. (cmd or "?") .. ")", f2 = F.report_bytes})
        end
        msg.info = (cmd or "reply") .. " report on channel " .. channel .. " (" .. #text .. " bytes, " .. (r and #r.chunks or 0) .. " chunks, " .. how .. ")"
    end

    local function parse(s, pos, d, cs, dir)
        local avail = #s - pos + 1
        if avail < 1 then return nil end
        local kind = s:byte(pos)
        local msg = {items = {}}
        local items = msg.items
        if kind ~= 1 and kind ~= 2 then
            table.insert(items, {f = F.kind, o = 0, l = 1, v = kind})
            msg.err, msg.fatal, msg.info = "unknown frame kind " .. kind, true, "unknown frame kind " .. kind
            return 1, msg
        end
        if avail < 5 then return nil end
        local channel = u32le(s, pos + 1)
        table.insert(items, {f = F.kind, o = 0, l = 1, v = kind})
        table.insert(items, {f = F.channel, o = 1, l = 4, le = true})
        if kind == 2 then
            msg.info = "CLOSE channel " .. channel
            msg.title = "rvOS sysinfo: CLOSE channel " .. channel
            if dir == 1 and cs.replies[channel] then
                finish_reply(cs, channel, msg, "close")
            elseif dir == 1 and cs.asked[channel] then
                cs.replies[channel] = {chunks = {}, size = 0}
                finish_reply(cs, channel, msg, "close")
            end
            return 5, msg
        end
        if avail < 14 then return nil end
        local caps = s:byte(pos + 13)
        if caps > 4 then
            msg.err, msg.fatal, msg.info = "frame carries " .. caps .. " caps, at most 4", true, "too many caps"
            table.insert(items, {f = F.cap_count, o = 13, l = 1, v = caps})
            return 14, msg
        end
        local len_at = 14 + 4 * caps
        if avail < len_at + 2 then return nil end
        local len = u16le(s, pos + len_at)
        if len > 1024 then
            msg.err, msg.fatal, msg.info = "frame carries " .. len .. " data bytes, at most 1024", true, "data too long"
            table.insert(items, {f = F.cap_count, o = 13, l = 1, v = caps})
            table.insert(items, {f = F.len, o = len_at, l = 2, le = true})
            return len_at + 2, msg
        end
        local total = len_at + 2 + len
        if avail < total then return nil end
        table.insert(items, {f = F.sender_pid, o = 5, l = 8, le = true})
        table.insert(items, {f = F.cap_count, o = 13, l = 1, v = caps})
        local capv = {}
        for k = 0, caps - 1 do
            table.insert(items, {f = F.cap, o = 14 + 4 * k, l = 4, le = true})
            capv[k + 1] = u32le(s, pos + 14 + 4 * k)
        end
        table.insert(items, {f = F.len, o = len_at, l = 2, le = true})
        local data = s:sub(pos + len_at + 2, pos + total - 1)
        if len > 0 then table.insert(items, {f = F.data, o = len_at + 2, l = len}) end
        local dofs = len_at + 2
        msg.title = "rvOS sysinfo: MESSAGE channel " .. channel
        if channel == 0 then
            -- The boot channel: BootRequest from the client, BootResponse from init.
            local tag = data:byte(1)
            if dir == 0 then
                if tag == 0 and #data >= 3 and #data >= 3 + u16le(data, 2) then
                    local name = data:sub(4, 3 + u16le(data, 2))
                    table.insert(items, {f = F.boot, o = dofs, l = len, v = "ConnectService"})
                    table.insert(items, {f = F.service, o = dofs + 3, l = #name, v = name})
                    msg.info = "ConnectService " .. name
                else
                    table.insert(items, {f = F.boot, o = dofs, l = len, v = "BootRequest tag " .. tostring(tag)})
                    msg.info = "boot request"
                end
            else
                if tag == 0 then
                    table.insert(items, {f = F.boot, o = dofs, l = len, v = "Ok"})
                    msg.info = "boot Ok" .. (capv[1] and (", channel " .. capv[1]) or "")
                elseif tag == 1 and #data >= 3 then
                    local m = data:sub(4, 3 + u16le(data, 2))
                    table.insert(items, {f = F.boot, o = dofs, l = len, v = "Error"})
                    table.insert(items, {f = F.boot_error, o = dofs + 3, l = #m, v = m})
                    msg.info = "boot Error: " .. m
                else
                    table.insert(items, {f = F.boot, o = dofs, l = len, v = "BootResponse tag " .. tostring(tag)})
                    msg.info = "boot response"
                end
            end
            return total, msg
        end
        if dir == 0 then
            -- A command on a service channel (rvos-wire: a one-byte enum tag; trailing bytes ignored).
            local tag = data:byte(1)
            local name = tag and commands[tag]
            if tag then table.insert(items, {f = F.command_tag, o = dofs, l = 1, v = tag}) end
            if name then
                table.insert(items, {f = F.command, o = dofs, l = 1, v = name})
                cs.asked[channel] = name
                cs.replies[channel] = nil
                msg.info = name .. " on channel " .. channel
            else
                table.insert(items, {f = F.command, o = dofs, l = math.min(len, 1), v = "(invalid)"})
                msg.info = "invalid command on channel " .. channel
                cs.asked[channel] = "(invalid)"
            end
            msg.title = "rvOS sysinfo: command " .. (name or "(invalid)")
            return total, msg
        end
        -- A reply chunk, or the sentinel.
        local r = cs.replies[channel]
        if not r then
            r = {chunks = {}, size = 0}
            cs.replies[channel] = r
        end
        if len == 0 then
            table.insert(items, {f = F.sentinel, o = len_at, l = 2, v = true})
            msg.info = "channel " .. channel .. " ends"
            msg.title = "rvOS sysinfo: end of reply on channel " .. channel
            finish_reply(cs, channel, msg, "sentinel")
        else
            table.insert(items, {f = F.chunk_len, o = len_at, l = 2, le = true})
            if r.size + len > MAX_RESPONSE then
                msg.err = "reply larger than " .. MAX_RESPONSE .. " bytes"
                cs.replies[channel] = nil
                cs.asked[channel] = nil
            else
                table.insert(r.chunks, data)
                r.size = r.size + len
                r.pending = r.pending or {}
                table.insert(r.pending, msg)
            end
            msg.title = "rvOS sysinfo: reply chunk on channel " .. channel
        end
        return total, msg
    end

    local function heuristic(s)
        -- The first frame of a connection: a MESSAGE on the boot channel 0 with no caps whose data is
        -- BootRequest::ConnectService{name}.
        if #s < 19 or s:byte(1) ~= 1 or u32le(s, 2) ~= 0 or s:byte(14) ~= 0 then return false end
        local len = u16le(s, 15)
        if len < 3 or len > 1024 or s:byte(17) ~= 0 then return false end
        return u16le(s, 18) == len - 3
    end

    -- The client side: the one that asks for a service on the boot channel (what the heuristic sees:
    -- 19 bytes may be all TCP has put together yet), else the one dialling 7461.
    local function tcp_dir(conv, pinfo, s)
        local src = tostring(pinfo.src) .. ":" .. pinfo.src_port
        if not conv.client then
            if heuristic(s) or pinfo.dst_port == 7461 then
                conv.client = src
            else
                conv.client = tostring(pinfo.dst) .. ":" .. pinfo.dst_port
            end
        end
        return src == conv.client and 0 or 1
    end

    -- Fewer than 19 bytes that could begin that frame: kind 1, channel 0, a sender pid, no caps, a
    -- length from 3 to 1024, the ConnectService tag 0.
    local function prefix(s)
        if #s == 0 or #s >= 19 or s:byte(1) ~= 1 then return false end
        for i = 2, math.min(#s, 5) do
            if s:byte(i) ~= 0 then return false end
        end
        if #s >= 14 and s:byte(14) ~= 0 then return false end
        if #s >= 16 then
            local len = u16le(s, 15)
            if len < 3 or len > 1024 then return false end
        end
        if #s >= 17 and s:byte(17) ~= 0 then return false end
        return true
    end

    register({proto = p, abbr = "rvos_sysinfo", colname = "rvOS sysinfo", c = c, parse = parse,
        new_conn = new_conn,
        encap = wtap_encaps.USER4, tcp = true, port = 7461, heuristic = heuristic, prefix = prefix,
        tcp_dir = tcp_dir})
end

---------------------------------------------------------------------------------------------------
-- The markers of a recording: the zero-length records "telemon: connected" / "closed" / "peer closed"
-- never reach a link-type dissector, so a postdissector hands them to their protocol.
---------------------------------------------------------------------------------------------------

do
    local by_encap = {}
    for _, P in ipairs(protocols) do by_encap[P.encap] = P end
    local markers = Proto("telemon_markers", "telemon recording markers")
    markers.dissector = function(tvb, pinfo, tree)
        if tvb:len() ~= 0 then return end
        local enc = f_encap()
        if not enc then return end
        local P = by_encap[enc.value]
        if not P then return end
        local comments = {}
        for _, c in ipairs({f_comment()}) do
            local text = tostring(c.value)
            if text:sub(1, 8) == "telemon:" then table.insert(comments, text) end
        end
        if #comments == 0 then return end
        local fi = f_interface()
        P.marker(pinfo, tree, fi and fi.value or 0, comments)
    end
    register_postdissector(markers)
end
