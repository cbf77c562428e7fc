"""Key positions of Redis's commands, known without asking a server.

A snapshot of ``COMMAND``'s key positions (name or ``container|sub``, first key, last key,
step, whether keys move with the arguments, and the key specs of those that do): the union of
the tables of every server the project is tested against (Redis 7.0, 8.2; Valkey 8.0, 9.1),
written by ``python -m tests.redis.client.command_snapshot`` and checked against the live
server by its tests. The pipeline window checks a segment's keys as the handler queues each
command; live, the connected server's own table is used, and this snapshot stands in before
one was read and under ``app.test()``, where there is no server. A command missing here, or one
whose keys move in a way neither :mod:`.keys` nor its specs can say, is one whose keys cannot be
known without the server. Being listed here says where a command's keys are, not that a given
server has it.
"""

from __future__ import annotations

from .keys import KeySearch, KeySpec

__all__ = ["KNOWN_COMMANDS", "format_line"]

_TABLE = """\
acl 0 0 0 0
acl|cat 0 0 0 0
acl|deluser 0 0 0 0
acl|dryrun 0 0 0 0
acl|genpass 0 0 0 0
acl|getuser 0 0 0 0
acl|help 0 0 0 0
acl|list 0 0 0 0
acl|load 0 0 0 0
acl|log 0 0 0 0
acl|save 0 0 0 0
acl|setuser 0 0 0 0
acl|users 0 0 0 0
acl|whoami 0 0 0 0
append 1 1 1 0
asking 0 0 0 0
auth 0 0 0 0
bgrewriteaof 0 0 0 0
bgsave 0 0 0 0
bitcount 1 1 1 0
bitfield 1 1 1 0
bitfield_ro 1 1 1 0
bitop 2 -1 1 0
bitpos 1 1 1 0
blmove 1 2 1 0
blmpop 0 0 0 1 i2/n0,1,1
blpop 1 -2 1 0
brpop 1 -2 1 0
brpoplpush 1 2 1 0
bzmpop 0 0 0 1 i2/n0,1,1
bzpopmax 1 -2 1 0
bzpopmin 1 -2 1 0
client 0 0 0 0
client|caching 0 0 0 0
client|capa 0 0 0 0
client|getname 0 0 0 0
client|getredir 0 0 0 0
client|help 0 0 0 0
client|id 0 0 0 0
client|import-source 0 0 0 0
client|info 0 0 0 0
client|kill 0 0 0 0
client|list 0 0 0 0
client|no-evict 0 0 0 0
client|no-touch 0 0 0 0
client|pause 0 0 0 0
client|reply 0 0 0 0
client|setinfo 0 0 0 0
client|setname 0 0 0 0
client|tracking 0 0 0 0
client|trackinginfo 0 0 0 0
client|unblock 0 0 0 0
client|unpause 0 0 0 0
cluster 0 0 0 0
clusterscan 1 1 1 0
cluster|addslots 0 0 0 0
cluster|addslotsrange 0 0 0 0
cluster|bumpepoch 0 0 0 0
cluster|cancelslotmigrations 0 0 0 0
cluster|count-failure-reports 0 0 0 0
cluster|countkeysinslot 0 0 0 0
cluster|delslots 0 0 0 0
cluster|delslotsrange 0 0 0 0
cluster|failover 0 0 0 0
cluster|flushslot 0 0 0 0
cluster|flushslots 0 0 0 0
cluster|forget 0 0 0 0
cluster|getkeysinslot 0 0 0 0
cluster|getslotmigrations 0 0 0 0
cluster|help 0 0 0 0
cluster|info 0 0 0 0
cluster|keyslot 0 0 0 0
cluster|links 0 0 0 0
cluster|meet 0 0 0 0
cluster|migrateslots 0 0 0 0
cluster|myid 0 0 0 0
cluster|myshardid 0 0 0 0
cluster|nodes 0 0 0 0
cluster|replicas 0 0 0 0
cluster|replicate 0 0 0 0
cluster|reset 0 0 0 0
cluster|saveconfig 0 0 0 0
cluster|set-config-epoch 0 0 0 0
cluster|setslot 0 0 0 0
cluster|shards 0 0 0 0
cluster|slaves 0 0 0 0
cluster|slot-stats 0 0 0 0
cluster|slots 0 0 0 0
cluster|syncslots 0 0 0 0
command 0 0 0 0
commandlog 0 0 0 0
commandlog|get 0 0 0 0
commandlog|help 0 0 0 0
commandlog|len 0 0 0 0
commandlog|reset 0 0 0 0
command|count 0 0 0 0
command|docs 0 0 0 0
command|getkeys 0 0 0 0
command|getkeysandflags 0 0 0 0
command|help 0 0 0 0
command|info 0 0 0 0
command|list 0 0 0 0
config 0 0 0 0
config|get 0 0 0 0
config|help 0 0 0 0
config|resetstat 0 0 0 0
config|rewrite 0 0 0 0
config|set 0 0 0 0
copy 1 2 1 0
dbsize 0 0 0 0
debug 0 0 0 0
decr 1 1 1 0
decrby 1 1 1 0
del 1 -1 1 0
delifeq 1 1 1 0
discard 0 0 0 0
dump 1 1 1 0
echo 0 0 0 0
eval 0 0 0 1 i2/n0,1,1
eval_ro 0 0 0 1 i2/n0,1,1
evalsha 0 0 0 1 i2/n0,1,1
evalsha_ro 0 0 0 1 i2/n0,1,1
exec 0 0 0 0
exists 1 -1 1 0
expire 1 1 1 0
expireat 1 1 1 0
expiretime 1 1 1 0
failover 0 0 0 0
fcall 0 0 0 1 i2/n0,1,1
fcall_ro 0 0 0 1 i2/n0,1,1
flushall 0 0 0 0
flushdb 0 0 0 0
function 0 0 0 0
function|delete 0 0 0 0
function|dump 0 0 0 0
function|flush 0 0 0 0
function|help 0 0 0 0
function|kill 0 0 0 0
function|list 0 0 0 0
function|load 0 0 0 0
function|restore 0 0 0 0
function|stats 0 0 0 0
geoadd 1 1 1 0
geodist 1 1 1 0
geohash 1 1 1 0
geopos 1 1 1 0
georadius 1 1 1 1 i1/r0,1,0 kSTORE@6/r0,1,0 kSTOREDIST@6/r0,1,0
georadius_ro 1 1 1 0
georadiusbymember 1 1 1 1 i1/r0,1,0 kSTORE@5/r0,1,0 kSTOREDIST@5/r0,1,0
georadiusbymember_ro 1 1 1 0
geosearch 1 1 1 0
geosearchstore 1 2 1 0
get 1 1 1 0
getbit 1 1 1 0
getdel 1 1 1 0
getex 1 1 1 0
getrange 1 1 1 0
getset 1 1 1 0
hdel 1 1 1 0
hello 0 0 0 0
hexists 1 1 1 0
hexpire 1 1 1 0
hexpireat 1 1 1 0
hexpiretime 1 1 1 0
hget 1 1 1 0
hgetall 1 1 1 0
hgetdel 1 1 1 0
hgetex 1 1 1 0
hincrby 1 1 1 0
hincrbyfloat 1 1 1 0
hkeys 1 1 1 0
hlen 1 1 1 0
hmget 1 1 1 0
hmset 1 1 1 0
hpersist 1 1 1 0
hpexpire 1 1 1 0
hpexpireat 1 1 1 0
hpexpiretime 1 1 1 0
hpttl 1 1 1 0
hrandfield 1 1 1 0
hscan 1 1 1 0
hset 1 1 1 0
hsetex 1 1 1 0
hsetnx 1 1 1 0
hstrlen 1 1 1 0
httl 1 1 1 0
hvals 1 1 1 0
incr 1 1 1 0
incrby 1 1 1 0
incrbyfloat 1 1 1 0
info 0 0 0 0
keys 0 0 0 0
lastsave 0 0 0 0
latency 0 0 0 0
latency|doctor 0 0 0 0
latency|graph 0 0 0 0
latency|help 0 0 0 0
latency|histogram 0 0 0 0
latency|history 0 0 0 0
latency|latest 0 0 0 0
latency|reset 0 0 0 0
lcs 1 2 1 0
lindex 1 1 1 0
linsert 1 1 1 0
llen 1 1 1 0
lmove 1 2 1 0
lmpop 0 0 0 1 i1/n0,1,1
lolwut 0 0 0 0
lpop 1 1 1 0
lpos 1 1 1 0
lpush 1 1 1 0
lpushx 1 1 1 0
lrange 1 1 1 0
lrem 1 1 1 0
lset 1 1 1 0
ltrim 1 1 1 0
memory 0 0 0 0
memory|doctor 0 0 0 0
memory|help 0 0 0 0
memory|malloc-stats 0 0 0 0
memory|purge 0 0 0 0
memory|stats 0 0 0 0
memory|usage 2 2 1 0
mget 1 -1 1 0
migrate 3 3 1 1 i3/r0,1,0 !kKEYS@-2/r-1,1,0
module 0 0 0 0
module|help 0 0 0 0
module|list 0 0 0 0
module|load 0 0 0 0
module|loadex 0 0 0 0
module|unload 0 0 0 0
monitor 0 0 0 0
move 1 1 1 0
mset 1 -1 2 0
msetex 0 0 0 1 i1/n0,1,2
msetnx 1 -1 2 0
multi 0 0 0 0
object 0 0 0 0
object|encoding 2 2 1 0
object|freq 2 2 1 0
object|help 0 0 0 0
object|idletime 2 2 1 0
object|refcount 2 2 1 0
persist 1 1 1 0
pexpire 1 1 1 0
pexpireat 1 1 1 0
pexpiretime 1 1 1 0
pfadd 1 1 1 0
pfcount 1 -1 1 0
pfdebug 2 2 1 0
pfmerge 1 -1 1 0
pfselftest 0 0 0 0
ping 0 0 0 0
psetex 1 1 1 0
psubscribe 0 0 0 0
psync 0 0 0 0
pttl 1 1 1 0
publish 0 0 0 0
pubsub 0 0 0 0
pubsub|channels 0 0 0 0
pubsub|help 0 0 0 0
pubsub|numpat 0 0 0 0
pubsub|numsub 0 0 0 0
pubsub|shardchannels 0 0 0 0
pubsub|shardnumsub 0 0 0 0
punsubscribe 0 0 0 0
quit 0 0 0 0
randomkey 0 0 0 0
readonly 0 0 0 0
readwrite 0 0 0 0
rename 1 2 1 0
renamenx 1 2 1 0
replconf 0 0 0 0
replicaof 0 0 0 0
reset 0 0 0 0
restore 1 1 1 0
restore-asking 1 1 1 0
role 0 0 0 0
rpop 1 1 1 0
rpoplpush 1 2 1 0
rpush 1 1 1 0
rpushx 1 1 1 0
sadd 1 1 1 0
save 0 0 0 0
scan 0 0 0 0
scard 1 1 1 0
script 0 0 0 0
script|debug 0 0 0 0
script|exists 0 0 0 0
script|flush 0 0 0 0
script|help 0 0 0 0
script|kill 0 0 0 0
script|load 0 0 0 0
script|show 0 0 0 0
sdiff 1 -1 1 0
sdiffstore 1 -1 1 0
select 0 0 0 0
set 1 1 1 0
setbit 1 1 1 0
setex 1 1 1 0
setnx 1 1 1 0
setrange 1 1 1 0
shutdown 0 0 0 0
sinter 1 -1 1 0
sintercard 0 0 0 1 i1/n0,1,1
sinterstore 1 -1 1 0
sismember 1 1 1 0
slaveof 0 0 0 0
slowlog 0 0 0 0
slowlog|get 0 0 0 0
slowlog|help 0 0 0 0
slowlog|len 0 0 0 0
slowlog|reset 0 0 0 0
smembers 1 1 1 0
smismember 1 1 1 0
smove 1 2 1 0
sort 1 1 1 1 i1/r0,1,0 ?/? ?/?
sort_ro 1 1 1 1 i1/r0,1,0 ?/?
spop 1 1 1 0
spublish 1 1 1 0
srandmember 1 1 1 0
srem 1 1 1 0
sscan 1 1 1 0
ssubscribe 1 -1 1 0
strlen 1 1 1 0
subscribe 0 0 0 0
substr 1 1 1 0
sunion 1 -1 1 0
sunionstore 1 -1 1 0
sunsubscribe 1 -1 1 0
swapdb 0 0 0 0
sync 0 0 0 0
time 0 0 0 0
touch 1 -1 1 0
ttl 1 1 1 0
type 1 1 1 0
unlink 1 -1 1 0
unsubscribe 0 0 0 0
unwatch 0 0 0 0
vadd 1 1 1 0
vcard 1 1 1 0
vdim 1 1 1 0
vemb 1 1 1 0
vgetattr 1 1 1 0
vinfo 1 1 1 0
vismember 1 1 1 0
vlinks 1 1 1 0
vrandmember 1 1 1 0
vrem 1 1 1 0
vsetattr 1 1 1 0
vsim 1 1 1 0
wait 0 0 0 0
waitaof 0 0 0 0
watch 1 -1 1 0
xack 1 1 1 0
xackdel 1 1 1 0
xadd 1 1 1 0
xautoclaim 1 1 1 0
xclaim 1 1 1 0
xdel 1 1 1 0
xdelex 1 1 1 0
xgroup 0 0 0 0
xgroup|create 2 2 1 0
xgroup|createconsumer 2 2 1 0
xgroup|delconsumer 2 2 1 0
xgroup|destroy 2 2 1 0
xgroup|help 0 0 0 0
xgroup|setid 2 2 1 0
xinfo 0 0 0 0
xinfo|consumers 2 2 1 0
xinfo|groups 2 2 1 0
xinfo|help 0 0 0 0
xinfo|stream 2 2 1 0
xlen 1 1 1 0
xpending 1 1 1 0
xrange 1 1 1 0
xread 0 0 0 1 kSTREAMS@1/r-1,1,2
xreadgroup 0 0 0 1 kSTREAMS@4/r-1,1,2
xrevrange 1 1 1 0
xsetid 1 1 1 0
xtrim 1 1 1 0
zadd 1 1 1 0
zcard 1 1 1 0
zcount 1 1 1 0
zdiff 0 0 0 1 i1/n0,1,1
zdiffstore 1 1 1 1 i1/r0,1,0 i2/n0,1,1
zincrby 1 1 1 0
zinter 0 0 0 1 i1/n0,1,1
zintercard 0 0 0 1 i1/n0,1,1
zinterstore 1 1 1 1 i1/r0,1,0 i2/n0,1,1
zlexcount 1 1 1 0
zmpop 0 0 0 1 i1/n0,1,1
zmscore 1 1 1 0
zpopmax 1 1 1 0
zpopmin 1 1 1 0
zrandmember 1 1 1 0
zrange 1 1 1 0
zrangebylex 1 1 1 0
zrangebyscore 1 1 1 0
zrangestore 1 2 1 0
zrank 1 1 1 0
zrem 1 1 1 0
zremrangebylex 1 1 1 0
zremrangebyrank 1 1 1 0
zremrangebyscore 1 1 1 0
zrevrange 1 1 1 0
zrevrangebylex 1 1 1 0
zrevrangebyscore 1 1 1 0
zrevrank 1 1 1 0
zscan 1 1 1 0
zscore 1 1 1 0
zunion 0 0 0 1 i1/n0,1,1
zunionstore 1 1 1 1 i1/r0,1,0 i2/n0,1,1
"""


def format_line(name: str, spec: KeySpec) -> str:
    """One line of the table: ``name first last step movable``, then, for a command whose
    keys move, its key specs (``i1/r0,1,0``: at index 1, a range; ``kSTORE@6/r0,1,0``: after
    the keyword ``STORE`` searched from argument 6; ``n0,1,1``: a key count; ``?``: unknown;
    a leading ``!``: incomplete)."""
    fields = [name, str(spec.first), str(spec.last), str(spec.step), str(int(spec.movable))]
    if spec.movable:
        fields += [_format_search(search) for search in spec.searches]
    return " ".join(fields)


def _format_search(search: KeySearch) -> str:
    if search.begin == "index":
        begin = f"i{search.index}"
    elif search.begin == "keyword":
        begin = f"k{search.keyword.decode()}@{search.startfrom}"
    else:
        begin = "?"
    if search.find == "range":
        find = f"r{search.lastkey},{search.keystep},{search.limit}"
    elif search.find == "keynum":
        find = f"n{search.keynumidx},{search.firstkey},{search.keystep}"
    else:
        find = "?"
    return f"{'!' if search.incomplete else ''}{begin}/{find}"


def _parse_search(text: str) -> KeySearch:
    incomplete = text.startswith("!")
    begin, find = text.lstrip("!").split("/")
    values: dict[str, int | bytes] = {}
    begin_type = find_type = "unknown"
    if begin.startswith("i"):
        begin_type, values["index"] = "index", int(begin[1:])
    elif begin.startswith("k"):
        keyword, startfrom = begin[1:].rsplit("@", 1)
        begin_type, values["keyword"], values["startfrom"] = (
            "keyword",
            keyword.encode(),
            int(startfrom),
        )
    if find.startswith("r"):
        find_type = "range"
        values["lastkey"], values["keystep"], values["limit"] = map(int, find[1:].split(","))
    elif find.startswith("n"):
        find_type = "keynum"
        values["keynumidx"], values["firstkey"], values["keystep"] = map(int, find[1:].split(","))
    return KeySearch(begin_type, find_type, incomplete=incomplete, **values)  # type: ignore[arg-type]


def _parse(table: str) -> dict[str, KeySpec]:
    specs: dict[str, KeySpec] = {}
    for line in table.splitlines():
        name, first, last, step, movable, *searches = line.split()
        specs[name] = KeySpec(
            int(first),
            int(last),
            int(step),
            movable == "1",
            tuple(_parse_search(search) for search in searches),
        )
    return specs


#: ``name -> KeySpec``, lower-case names, subcommands as ``container|sub``.
KNOWN_COMMANDS: dict[str, KeySpec] = _parse(_TABLE)
