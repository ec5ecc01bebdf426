# The import id is <prefix>@<vhost>: here prefix "myapp" in the default
# virtual host "/". A '@' or '%' inside either part is percent-encoded
# ("%40", "%25"); an id without '@' means the default virtual host.
#
# Import finds every queue "<prefix>.<name>" whose dead-letter queue
# "<prefix>.<name>.dead" exists too, and ignores hold queues
# ("<prefix>.<name>.deferred.<ms>"). It writes message_ttl as hours,
# minutes, seconds and milliseconds ("1m30s"); a configuration that says
# "90s", the same duration, plans no change, and the state keeps "1m30s".
terraform import queuey_queue_set.example 'myapp@/'
