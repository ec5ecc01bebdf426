# Takes over a set that already exists, say one an application declared at
# start-up, beside its resource block (above). The id is <prefix>@<vhost>, as
# for `terraform import`. When the resource block matches the broker, the plan
# shows the import and no change, and the apply declares and deletes nothing:
# the queues keep their messages. The block may go once applied.
import {
  to = queuey_queue_set.example
  id = "myapp@/"
}
